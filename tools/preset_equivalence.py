"""Preset equivalence across a refactor (issue 23): every preset built from seed 0 must give the same initial
parameters and the same logits on the same input as the recorded baseline (within 1e-6 in float32).

    python tools/preset_equivalence.py save DIR     # on the old code: record DIR/PRESET.pt
    python tools/preset_equivalence.py check DIR    # on the new code: compare with DIR (exit 1 on a difference)

Only the public API is used (``get_preset``, ``build_model``, ``state_dict``, ``forward``), so the same script runs
on both sides. Parameter names are compared after ``upgrade_state_dict`` maps a checkpoint of the old layout onto the
new one (the same mapping ``from_pretrained`` applies), when the installed package has it.
"""

import sys
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

import kuramoto_attention as ka


def record(name: str) -> dict:
    torch.manual_seed(0)
    model = ka.build_model(*ka.get_preset(name))
    gen = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 256, (2, 48), generator=gen)
    with torch.no_grad():
        logits = model(idx)
    # the training path too (with autograd on, the Kuramoto layers run their hand-fused kernels): logits and gradients
    train_logits = model(idx)
    train_logits.log_softmax(-1)[..., 0].mean().backward()
    grads = {k: p.grad.clone() for k, p in model.named_parameters() if p.grad is not None}
    return {"state": {k: v.clone() for k, v in model.state_dict().items()}, "idx": idx, "logits": logits,
            "train_logits": train_logits.detach(), "grads": grads}


def main() -> int:
    if len(sys.argv) != 3 or sys.argv[1] not in ("save", "check"):
        print("usage: python tools/preset_equivalence.py save|check DIR", file=sys.stderr)
        return 2
    action, folder = sys.argv[1], Path(sys.argv[2])
    names = list(ka.PRESETS)
    if action == "save":
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            torch.save(record(name), folder / f"{name}.pt")
            print(f"saved {name}")
        return 0
    upgrade = getattr(ka, "upgrade_state_dict", lambda family, sd: sd)
    bad = 0
    for path in sorted(folder.glob("*.pt")):
        name = path.stem
        if name not in names:
            print(f"{name}: MISSING preset")
            bad += 1
            continue
        old, new = torch.load(path), record(name)
        family = ka.get_preset(name)[0]
        old_state = upgrade(family, old["state"])
        if set(old_state) != set(new["state"]):
            print(f"{name}: parameter names differ: only old {sorted(set(old_state) - set(new['state']))}, "
                  f"only new {sorted(set(new['state']) - set(old_state))}")
            bad += 1
            continue
        worst = max((old_state[k].double() - new["state"][k].double()).abs().max().item() for k in old_state)
        model = ka.build_model(*ka.get_preset(name))
        model.load_state_dict(old_state)
        with torch.no_grad():
            logits = model(old["idx"])
        dlog = (logits - old["logits"]).abs().max().item()
        dinit = (new["logits"] - old["logits"]).abs().max().item()
        with torch.no_grad(), sdpa_kernel(SDPBackend.MATH):  # the kernel the old code fell back to for some presets
            dmath = (model(old["idx"]) - old["logits"]).abs().max().item()
        dtrain = dgrad = 0.0
        if "train_logits" in old:  # recorded by this version of the tool
            dtrain = (new["train_logits"] - old["train_logits"]).abs().max().item()
            old_grads = upgrade(family, old["grads"])
            dgrad = max((old_grads[k] - new["grads"][k]).abs().max().item() for k in old_grads)
        ok = worst <= 1e-6 and dlog <= 1e-6 and dinit <= 1e-6 and dtrain <= 1e-6 and dgrad <= 1e-6
        bad += not ok
        print(f"{name}: {'OK' if ok else 'DIFFERENT'}  init params max|Δ| {worst:.2e}, logits of the old weights "
              f"max|Δ| {dlog:.2e}, of a fresh seed-0 model {dinit:.2e}, on the math SDPA kernel {dmath:.2e}; training "
              f"path logits {dtrain:.2e}, gradients {dgrad:.2e}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
