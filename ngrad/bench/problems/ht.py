"""ADBench's and GradBench's ``ht``: hand tracking, the residuals between observed points and a
skinned hand model posed by 26 parameters, and their Jacobian.

The formulas are GradBench's C++ reference (``cpp/gradbench/evals/ht.hpp``): ``theta`` (26) is
a global rotation (angle-axis), a translation and four angles per finger, spread into a
(bones + 3, 3) table of pose parameters; each bone's Euler angles (x, z, y) give its rotation
Rz Ry Rx, posed on its base relative transform and chained to its parent's; the skinned vertex
positions are the weighted sum of each bone's transform (times its inverse base absolute) applied
to the base positions, optionally mirrored, then rotated (the identity when the angle-axis norm
is below 1e-4), scaled by 1 and translated. The residual of point i is ``points[i]`` minus its
vertex ``correspondences[i]`` ("simple") or, with ``us`` given ("complicated"), minus the point
of triangle ``correspondences[i]`` with barycentric weights u0, u1, 1 - u0 - u1.

Inputs are GradBench's ``HTInput`` as arrays (``model_arrays``): matrices row-major as its JSON
holds them (the reference's column-major reading transposes twice, so they mean the same).
The Jacobian is (3 npts, 26) in the simple case and (3 npts, 2 + 26) in the complicated one,
whose first two columns are each residual's derivative in its own point's u0 and u1 (the
us-block is block diagonal with 3 x 2 blocks, as the reference stores it).
"""

import numpy as np

import ngrad
from ngrad.autograd.functional import batched_jvp

__all__ = ["model_arrays", "residuals", "jacobian"]


def pose_index(n_bones):
    """(n_bones + 3, 3) positions into [theta (26), 0, 1]: the reference's ``to_pose_params``."""
    zero, one = 26, 27
    index = np.full((n_bones + 3, 3), zero, dtype=np.int64)
    index[0], index[1], index[2] = [0, 1, 2], one, [3, 4, 5]
    i_theta, row = 6, 5
    for _finger in range(5):
        for joint in range(3):
            index[row, 0], i_theta = i_theta, i_theta + 1
            if joint == 0:
                index[row, 1], i_theta = i_theta, i_theta + 1
            row += 1
        row += 1
    return index


def model_arrays(inp):
    """GradBench's JSON ``HTInput`` as the arrays ``residuals`` takes (and ``theta``, ``us``)."""
    data, model = inp["data"], inp["data"]["model"]
    f64 = lambda k: np.asarray(model[k], dtype=np.float64)  # noqa: E731
    us = np.asarray(inp["us"], dtype=np.float64).reshape(-1, 2)
    parents = [int(p) for p in model["parents"]]
    corr = np.asarray(data["correspondences"], dtype=np.int64)
    theta = np.asarray(inp["theta"], dtype=np.float64)
    return {
        "theta": theta,
        "us": us,
        "base_relatives": f64("base_relatives"),
        "inverse_base_absolutes": f64("inverse_base_absolutes"),
        "base_positions": f64("base_positions"),
        "weights": f64("weights"),
        "points": np.asarray(data["points"], dtype=np.float64),
        "targets": np.asarray(model["triangles"], dtype=np.int64)[corr] if len(us) else corr,
        "parents": tuple(parents),
        "mirrored": bool(model["is_mirrored"]),
        "small_rotation": bool(np.linalg.norm(theta[:3]) < 1e-4),
    }


def _matrices(T, entries, n):
    """(n, 3, 3) from nine (n,) tensors given row by row."""
    return T.stack(entries, 1).reshape(n, 3, 3)


def _bone_rotations(T, angles):
    """Rz Ry Rx per row of ``angles`` (n, 3), read as (x, z, y) like the reference."""
    n = angles.shape[0]
    cx, sx = T.cos(angles[:, 0]), T.sin(angles[:, 0])
    cz, sz = T.cos(angles[:, 1]), T.sin(angles[:, 1])
    cy, sy = T.cos(angles[:, 2]), T.sin(angles[:, 2])
    one, zero = T.ones_like(cx), T.zeros_like(cx)
    rx = _matrices(T, [one, zero, zero, zero, cx, -sx, zero, sx, cx], n)
    ry = _matrices(T, [cy, zero, sy, zero, one, zero, -sy, zero, cy], n)
    rz = _matrices(T, [cz, -sz, zero, sz, cz, zero, zero, zero, one], n)
    return T.matmul(T.matmul(rz, ry), rx)


def _angle_axis(T, v):
    """The rotation of the angle-axis vector ``v`` (3,) with norm at least 1e-4."""
    norm = T.sqrt(T.sum(v * v))
    x, y, z = v[0] / norm, v[1] / norm, v[2] / norm
    s, c = T.sin(norm), T.cos(norm)
    entries = [
        [x * x + (1 - x * x) * c, x * y * (1 - c) - z * s, x * z * (1 - c) + y * s],
        [x * y * (1 - c) + z * s, y * y + (1 - y * y) * c, y * z * (1 - c) - x * s],
        [x * z * (1 - c) - y * s, z * y * (1 - c) + x * s, z * z + (1 - z * z) * c],
    ]
    return T.stack([T.stack(row) for row in entries])


def vertex_positions(T, theta, base_relatives, inverse_base_absolutes, base_positions, weights, **kw):
    """(vertices, 3): the posed, skinned and globally transformed hand."""
    parents, mirrored, small_rotation = kw["parents"], kw["mirrored"], kw["small_rotation"]
    n_bones = base_relatives.shape[0]
    ext = T.cat([theta, T.zeros(1, dtype=theta.dtype), T.ones(1, dtype=theta.dtype)])
    pose = ext[pose_index(n_bones)]
    rot = _bone_rotations(T, pose[3:])
    homogeneous = T.cat([T.cat([rot, T.zeros((n_bones, 3, 1), dtype=theta.dtype)], 2), _last_rows(T, n_bones)], 1)
    relatives = T.matmul(base_relatives, homogeneous)
    absolutes = []
    for i, parent in enumerate(parents):  # a parent comes before its children
        absolutes.append(relatives[i] if parent == -1 else T.matmul(absolutes[parent], relatives[i]))
    transforms = T.matmul(T.stack(absolutes), inverse_base_absolutes)[:, :3, :]
    # sum over bones of weight * (transform @ base position), as one product with the weights
    skin = T.matmul(weights, transforms.reshape(n_bones, 12)).reshape(-1, 3, 4)
    positions = T.sum(skin * base_positions[:, None, :], 2)
    if mirrored:
        positions = positions * T.tensor([-1.0, 1.0, 1.0], dtype=theta.dtype)
    # the reference's branch on the rotation's size, decided on the input's value
    rotation = T.eye(3, dtype=theta.dtype) if small_rotation else _angle_axis(T, pose[0])
    rotation = rotation * pose[1][None, :]  # the reference scales each column (by 1)
    return T.matmul(positions, rotation.T) + pose[2]


def _last_rows(T, n):
    row = T.tensor([[0.0, 0.0, 0.0, 1.0]], dtype=T.float64)
    return T.stack([row] * n)


def residuals(T, theta, us, base_relatives, inverse_base_absolutes, base_positions, weights, points, targets, **kw):
    """(npts, 3): observed points minus the model's (``kw``: ``parents``, ``mirrored`` and
    ``small_rotation``, whether theta's angle-axis part has norm below 1e-4)."""
    # only the vertices the residuals read are skinned (each vertex is skinned on its own)
    used, targets = np.unique(targets, return_inverse=True)
    targets = targets.reshape(-1, 3) if us.shape[0] else targets.reshape(-1)
    if hasattr(T, "from_numpy"):  # index tensors are inputs of the program, not constants of its tape
        used, targets = T.from_numpy(used), T.from_numpy(targets)
    base_positions, weights = base_positions[used], weights[used]
    pos = vertex_positions(T, theta, base_relatives, inverse_base_absolutes, base_positions, weights, **kw)
    if us.shape[0] == 0:
        return points - pos[targets]
    u0, u1 = us[:, :1], us[:, 1:]
    return points - (u0 * pos[targets[:, 0]] + u1 * pos[targets[:, 1]] + (1 - u0 - u1) * pos[targets[:, 2]])


def _tensors(arrays):
    return {
        k: ngrad.from_numpy(v) if isinstance(v, np.ndarray) and v.dtype == np.float64 else v for k, v in arrays.items()
    }


def objective(arrays):
    """The residuals as a flat (3 npts,) array, point by point."""
    return residuals(ngrad, **_tensors(arrays)).numpy().reshape(-1)


def jacobian(arrays):
    """(3 npts, 26) or (3 npts, 2 + 26): one batched forward-mode pass, one tangent per column
    (the two us columns: every point's u0, then every point's u1, at once)."""
    t = _tensors(arrays)
    theta, us = t["theta"], t["us"]
    n_theta, npts = theta.shape[0], us.shape[0]
    eye = ngrad.eye(n_theta, dtype=ngrad.float64)
    err = residuals(ngrad, **t).reshape(-1)
    if npts == 0:
        (tangent,) = batched_jvp([err], [theta], [eye])
    else:
        us_t = ngrad.zeros((2 + n_theta, npts, 2), dtype=ngrad.float64)
        us_t = ngrad.cat([ngrad.eye(2, dtype=ngrad.float64)[:, None, :].expand(2, npts, 2), us_t[2:]])
        theta_t = ngrad.cat([ngrad.zeros((2, n_theta), dtype=ngrad.float64), eye])
        (tangent,) = batched_jvp([err], [us, theta], [us_t, theta_t])
    return tangent.T.numpy()


# ADBench's hand (every model in GradBench's ht data): the wrist, four bones per finger chained
# from the wrist, the forearm
HAND_PARENTS = [-1, 0, 1, 2, 3, 0, 5, 6, 7, 0, 9, 10, 11, 0, 13, 14, 15, 0, 17, 18, 19, 0]


def small_input(complicated, n_verts=8, npts=6):
    """A small hand of ADBench's shape in GradBench's JSON format (deterministic; to compile
    the programs of that shape before the real inputs come)."""
    rng = np.random.default_rng(0)
    n_bones = len(HAND_PARENTS)
    transforms = np.tile(np.eye(4), (n_bones, 1, 1))
    transforms[:, :3, 3] = rng.normal(size=(n_bones, 3))
    model = {
        "bone_count": n_bones,
        "bone_names": [f"bone{i}" for i in range(n_bones)],
        "parents": HAND_PARENTS,
        "base_relatives": transforms.tolist(),
        "inverse_base_absolutes": transforms.tolist(),
        "base_positions": np.c_[rng.normal(size=(n_verts, 3)), np.ones(n_verts)].tolist(),
        "weights": np.full((n_verts, n_bones), 1 / n_bones).tolist(),
        "triangles": [[i, (i + 1) % n_verts, (i + 2) % n_verts] for i in range(n_verts)],
        "is_mirrored": False,
    }
    data = {
        "model": model,
        "correspondences": [i % n_verts for i in range(npts)],
        "points": rng.normal(size=(npts, 3)).tolist(),
    }
    return {
        "theta": (0.3 * rng.normal(size=26)).tolist(),
        "us": (0.3 * rng.random((npts, 2))).tolist() if complicated else [],
        "data": data,
    }
