"""``method=dafl`` (scale=paper) epoch by epoch with its health: does a run stop learning, and where?

    python tools/dafl_diagnose.py SEED EPOCHS SECONDS data.root=../shared/data [overrides]   # OUT=folder for JSON

Per epoch of 120 iterations (``method.iterations_per_epoch``): test accuracy of the last iterate, the student's
gradient norm (min and max over the epoch's steps), steps with a non-finite parameter or gradient or a zero
student gradient (the first one is printed as FIRST BAD with its losses), the generator's image std and largest
|pixel|, the teacher's and the student's class counts on one generated batch, the mean losses. Stops after EPOCHS
or once SECONDS have passed; writes ``$OUT/diag_s<SEED>.json`` after every epoch. Written after two of our
seeds froze mid-run in a crowded GPU lease (docs/anchors.md): an uncrowded rerun is the control.
"""
import json, math, os, sys, time
import torch
from dafl_side_by_side import dafl_trainer  # tools/ is this script's folder
from dpsd.teachers import evaluate_accuracy
seed, epochs, limit = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
cfg, data, tr, record = dafl_trainer(sys.argv[4:], seed)
teacher, device = tr.teacher, tr.device
out, start, first_bad = [], time.time(), None
def norm(ps): return math.sqrt(sum(float(p.grad.pow(2).sum()) for p in ps if p.grad is not None))
for epoch in range(epochs):
    gmin, gmax, bad, sl, gl, gen_std, gen_absmax, classes = 1e9, 0.0, 0, 0.0, 0.0, 0.0, 0.0, None
    for i in range(int(cfg.method.iterations_per_epoch)):
        m = tr.step()
        g = norm(tr.student.parameters()); gg = norm(tr.generator.parameters())
        gmin, gmax = min(gmin, g), max(gmax, g)
        fin = all(torch.isfinite(p).all() for p in list(tr.student.parameters()) + list(tr.generator.parameters()))
        if not fin or not math.isfinite(g) or not math.isfinite(gg) or g == 0.0:
            bad += 1
            if first_bad is None:
                first_bad = {"epoch": epoch, "step": i, "student_grad": g, "generator_grad": gg, "finite_params": bool(fin),
                             **{k: float(v) for k, v in m.items()}}
                print("FIRST BAD", first_bad, flush=True)
        sl += float(m["student_loss"]) / int(cfg.method.iterations_per_epoch); gl += float(m.get("generator_loss", 0)) / int(cfg.method.iterations_per_epoch)
    with torch.no_grad():
        x = tr.images(); gen_std, gen_absmax = float(x.std()), float(x.abs().max())
        classes = torch.bincount(teacher(x).argmax(1), minlength=10).tolist()
        s_classes = torch.bincount(tr.student(x).argmax(1), minlength=10).tolist()
    acc = evaluate_accuracy(tr.student, data.test, device)
    row = dict(epoch=epoch, acc=acc, student_grad_min=gmin, student_grad_max=gmax, bad_steps=bad, student_loss=sl,
               generator_loss=gl, gen_std=gen_std, gen_absmax=gen_absmax, teacher_classes=classes, student_classes=s_classes,
               seconds=time.time() - start)
    out.append(row); print(row, flush=True)
    with open(os.path.join(os.environ.get("OUT", "/tmp"), f"diag_s{seed}.json"), "w") as f:
        json.dump({"first_bad": first_bad, "epochs": out, "teacher": record.get("test_accuracy")}, f, indent=1)
    if time.time() - start > limit: break
