import numpy as np, convstencil as cs, sys
rng = np.random.default_rng(5)
ok = True
for name in ("heat3d", "box3d27p"):
    for mode in ("constant", "wrap", "nearest", "reflect", "mirror"):
        for shape, steps in (((40, 61, 139), 11), ((9, 17, 70), 5)):
            g = rng.random(shape)
            want = cs.apply(g, name, steps=steps, mode=mode, cval=0.5, backend="cpu")
            got = cs.apply(g, name, steps=steps, mode=mode, cval=0.5, backend="cuda-core")
            info = cs.last_run_info()
            err = np.linalg.norm(got - want) / np.linalg.norm(want)
            good = err <= 1e-12 and info["fused_depth"] == min(4, steps)
            ok &= good
            print("ok " if good else "FAIL", name, mode, shape, steps, info["fused_depth"], "%.2e" % err, flush=True)
print("all ok" if ok else "FAILURES")
sys.exit(0 if ok else 1)
