"""``ngrad bench``: benchmark problems and the runner that times them against peers."""
