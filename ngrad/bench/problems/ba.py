"""ADBench's and GradBench's ``ba``: the Jacobian of bundle adjustment's residuals, sparse.

Cameras (n, 11) hold a Rodrigues rotation (0:3), a centre (3:6), a focal length (6), a
principal point (7:9) and two radial distortion coefficients (9:11); points are (m, 3);
observation i sees point ``obs[i, 1]`` from camera ``obs[i, 0]`` at ``feats[i]`` with weight
``w[i]``. The residuals are w_i * (project(camera, point) - feat_i) (two per observation) and
1 - w_i^2 (one per observation). Each residual depends on one camera, one point and one
weight, so the Jacobian is sparse: 2 rows of 15 entries per observation, then p rows of one.
``vals`` lists the entries row by row (camera, then point, then weight columns), as
ADBench's compressed-row matrix does; :func:`sparsity` gives its row offsets and columns.

The size is p, the number of observations, with n = p // 650 + 1 cameras and m = p // 4 + 1
points; observation i uses camera i mod n and point i mod m (GradBench's layout), with
rotations of about 0.1 rad, points about 10 units in front of the cameras, focal lengths near 1
and weights uniform on [0.5, 1.5]. Rotations must be nonzero (the formula divides by |r|).
"""

import numpy as np

from . import Problem


def cross(T, a, b):
    a0, a1, a2 = a[:, 0], a[:, 1], a[:, 2]
    b0, b1, b2 = b[:, 0], b[:, 1], b[:, 2]
    return T.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], 1)


def residuals(T, cams, points, w, feats):
    """The (p, 2) reprojection residuals of per-observation cameras (p, 11) and points (p, 3)."""
    rot, xc = cams[:, 0:3], points - cams[:, 3:6]
    theta = T.sqrt(T.sum(rot * rot, 1))[:, None]
    cos, sin = T.cos(theta), T.sin(theta)
    axis = rot / theta
    tmp = T.sum(axis * xc, 1)[:, None] * (1 - cos)
    rotated = xc * cos + cross(T, axis, xc) * sin + axis * tmp
    proj = rotated[:, 0:2] / rotated[:, 2:3]
    rsq = T.sum(proj * proj, 1)[:, None]
    distorted = proj * (1 + cams[:, 9:10] * rsq + cams[:, 10:11] * rsq * rsq)
    return w[:, None] * (distorted * cams[:, 6:7] + cams[:, 7:9] - feats)


def compute(T, t):
    cams = t["cams"][t["obs"][:, 0]].detach().requires_grad_()
    points = t["x"][t["obs"][:, 1]].detach().requires_grad_()
    w = t["w"].detach().requires_grad_()
    r = residuals(T, cams, points, w, t["feats"])
    p = r.shape[0]
    rows = T.eye(2, dtype=T.float64)[:, None, :].expand(2, p, 2)  # one batched pass per residual row
    dc, dx, dw = T.autograd.grad(r, (cams, points, w), rows, is_grads_batched=True)
    jac = T.cat([dc, dx, dw[:, :, None]], 2)  # (2, p, 15)
    vals = T.cat([T.swapaxes(jac, 0, 1).reshape(p * 30), -2 * w.detach()])
    r, w = r.detach(), w.detach()  # the value is reported, not differentiated
    value = T.sum(r * r) + T.sum((1 - w * w) ** 2)
    return value, {"vals": vals}


def jax_system(jax, J):
    def one(cam, point, w, feat):
        return residuals(J, cam[None], point[None], w[None], feat[None])[0]

    @jax.jit
    def step(cams, x, w, feats, obs):
        c, pts = cams[obs[:, 0]], x[obs[:, 1]]
        jc, jx, jw = jax.vmap(jax.jacfwd(one, argnums=(0, 1, 2)))(c, pts, w, feats)
        r = residuals(J, c, pts, w, feats)
        jac = J.concatenate([jc, jx, jw[:, :, None]], 2)  # (p, 2, 15)
        vals = J.concatenate([jac.reshape(-1), -2 * w])
        return J.sum(r * r) + J.sum((1 - w * w) ** 2), vals

    def run(inp):
        value, vals = step(inp["cams"], inp["x"], inp["w"], inp["feats"], inp["obs"])
        return float(value), {"vals": np.asarray(vals)}

    return run


def _cross_t(a, at, b, bt):
    """Tangent of cross(a, b): a, b (p, 3), tangents (p, 3, 15)."""

    def cr(u, v):
        return np.stack(
            [
                u[:, 1] * v[:, 2] - u[:, 2] * v[:, 1],
                u[:, 2] * v[:, 0] - u[:, 0] * v[:, 2],
                u[:, 0] * v[:, 1] - u[:, 1] * v[:, 0],
            ],
            1,
        )

    return cr(at, b[:, :, None]) + cr(a[:, :, None], bt)


def numpy(inp):
    """Forward mode by hand: every quantity carries its tangent along the 15 parameters."""
    obs = inp["obs"]
    cams, X, w, feats = inp["cams"][obs[:, 0]], inp["x"][obs[:, 1]], inp["w"], inp["feats"]
    p = len(w)
    seed = np.zeros((p, 15, 15))
    seed[:, np.arange(15), np.arange(15)] = 1
    cam_t, x_t, w_t = seed[:, 0:11], seed[:, 11:14], seed[:, 14]  # (p, 11, 15), (p, 3, 15), (p, 15)
    rot, rot_t = cams[:, 0:3], cam_t[:, 0:3]
    xc, xc_t = X - cams[:, 3:6], x_t - cam_t[:, 3:6]
    sq = (rot * rot).sum(1)
    theta = np.sqrt(sq)[:, None]
    theta_t = (rot[:, :, None] * rot_t).sum(1) / theta
    cos, sin = np.cos(theta), np.sin(theta)
    cos_t, sin_t = -sin * theta_t, cos * theta_t
    axis = rot / theta
    axis_t = rot_t / theta[:, :, None] - rot[:, :, None] * (theta_t / theta**2)[:, None, :]
    dot = (axis * xc).sum(1)[:, None]
    dot_t = (axis_t * xc[:, :, None] + axis[:, :, None] * xc_t).sum(1)
    tmp, tmp_t = dot * (1 - cos), dot_t * (1 - cos) - dot * cos_t
    axc = np.stack(
        [
            axis[:, 1] * xc[:, 2] - axis[:, 2] * xc[:, 1],
            axis[:, 2] * xc[:, 0] - axis[:, 0] * xc[:, 2],
            axis[:, 0] * xc[:, 1] - axis[:, 1] * xc[:, 0],
        ],
        1,
    )
    axc_t = _cross_t(axis, axis_t, xc, xc_t)
    R = xc * cos + axc * sin + axis * tmp
    R_t = (
        xc_t * cos[:, :, None]
        + xc[:, :, None] * cos_t[:, None]
        + axc_t * sin[:, :, None]
        + axc[:, :, None] * sin_t[:, None]
        + axis_t * tmp[:, :, None]
        + axis[:, :, None] * tmp_t[:, None]
    )
    proj = R[:, 0:2] / R[:, 2:3]
    proj_t = R_t[:, 0:2] / R[:, 2:3, None] - R[:, 0:2, None] * (R_t[:, 2] / R[:, 2:3] ** 2)[:, None]
    rsq = (proj * proj).sum(1)[:, None]
    rsq_t = (2 * proj[:, :, None] * proj_t).sum(1)
    k1, k2 = cams[:, 9:10], cams[:, 10:11]
    lr = 1 + k1 * rsq + k2 * rsq * rsq
    lr_t = cam_t[:, 9] * rsq + k1 * rsq_t + cam_t[:, 10] * rsq * rsq + 2 * k2 * rsq * rsq_t
    dist, dist_t = proj * lr, proj_t * lr[:, :, None] + proj[:, :, None] * lr_t[:, None]
    f = cams[:, 6:7]
    out = dist * f + cams[:, 7:9]
    out_t = dist_t * f[:, :, None] + dist[:, :, None] * cam_t[:, 6][:, None] + cam_t[:, 7:9]
    r = w[:, None] * (out - feats)
    r_t = w_t[:, None] * (out - feats)[:, :, None] + w[:, None, None] * out_t  # (p, 2, 15)
    value = float((r * r).sum() + ((1 - w * w) ** 2).sum())
    return value, {"vals": np.concatenate([r_t.reshape(-1), -2 * w])}


def sparsity(n, m, obs):
    """Row offsets and column indices of the Jacobian whose entries ``vals`` lists."""
    p = len(obs)
    per_obs = np.concatenate(
        [
            11 * obs[:, :1] + np.arange(11),
            11 * n + 3 * obs[:, 1:2] + np.arange(3),
            11 * n + 3 * m + np.arange(p)[:, None],
        ],
        1,
    )  # (p, 15)
    cols = np.concatenate([np.repeat(per_obs, 2, axis=0).reshape(-1), 11 * n + 3 * m + np.arange(p)])
    rows = np.concatenate([np.arange(0, 30 * p + 1, 15), 30 * p + np.arange(1, p + 1)])
    return rows, cols


def expand(n, m, p, cam, x, w, feat):
    """GradBench's compressed ba input (one camera, point, weight and feature, repeated) in full."""
    i = np.arange(p)
    return {
        "cams": np.tile(np.asarray(cam, dtype=np.float64), (n, 1)),
        "x": np.tile(np.asarray(x, dtype=np.float64), (m, 1)),
        "w": np.full(p, float(w)),
        "feats": np.tile(np.asarray(feat, dtype=np.float64), (p, 1)),
        "obs": np.stack([i % n, i % m], 1),
    }


def inputs(p, rng):
    n, m = p // 650 + 1, p // 4 + 1
    cams = np.concatenate(
        [
            rng.normal(0, 0.1, (n, 3)),
            np.c_[rng.normal(0, 0.5, (n, 2)), np.zeros(n)],
            rng.uniform(0.8, 1.2, (n, 1)),
            rng.normal(0, 0.01, (n, 2)),
            rng.normal(0, 1e-3, (n, 2)),
        ],
        1,
    )
    x = np.c_[rng.normal(0, 1, (m, 2)), rng.uniform(8, 12, m)]
    i = np.arange(p)
    return {
        "cams": cams,
        "x": x,
        "w": rng.uniform(0.5, 1.5, p),
        "feats": rng.normal(0, 0.1, (p, 2)),
        "obs": np.stack([i % n, i % m], 1),
    }


PROBLEMS = [
    Problem(
        "ba",
        "bundle adjustment: the sparse Jacobian of the reprojection residuals (GradBench ba)",
        "p, the number of observations",
        [10**4, 10**5],
        [10**4],
        inputs,
        numpy,
        wrt=("cams", "x", "w"),
        compute=compute,
        jax=jax_system,
    ),
]
