"""The library's shape: the installed package never imports the lab or the benchmark, and has no import circles."""

import ast
import json
from pathlib import Path

import torch

SRC = Path(__file__).resolve().parents[1] / "src" / "kuramoto_attention"


def _imports(path: Path) -> set[str]:
    """The absolute module names a file imports (relative imports resolved against its package)."""
    package = ".".join(path.relative_to(SRC.parent).with_suffix("").parts[:-1])
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            out |= {base} | {f"{base}.{a.name}" for a in node.names}
    return out


def test_the_package_never_imports_the_lab_or_the_benchmark():
    for path in SRC.rglob("*.py"):
        bad = {m for m in _imports(path) if m.split(".")[0] in ("lab", "benchmarks", "tools")}
        assert not bad, f"{path.relative_to(SRC.parent)} imports {sorted(bad)}"


def test_the_package_has_no_import_circles():
    modules = {".".join(p.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__"): p
               for p in SRC.rglob("*.py")}
    graph = {m: {i for i in _imports(p) if i in modules and i != m} for m, p in modules.items()}
    graph = {m: {i for i in deps if modules[i].name != "__init__.py"} for m, deps in graph.items()}
    state: dict[str, int] = {}

    def visit(m: str, trail: list[str]) -> None:
        state[m] = 1
        for n in graph[m]:
            assert state.get(n) != 1, f"import circle: {' -> '.join([*trail, m, n])}"
            if n not in state:
                visit(n, [*trail, m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])


# config.json of a ka-tiny checkpoint written before the reorganisation (flat fields, retired ones at their defaults)
OLD_CONFIG = {
    "family": "kuramoto", "dim": 16, "depth": 2, "heads": 2, "ff_hidden": 32, "ff": "lift", "ff_wrap": False,
    "ff_output": "increment", "ff_proj": "none", "ff_proj_dim": 0, "value_gate_input": "lift", "gates_input": "lift",
    "shared_gates": False, "gates": True, "omega": "learned", "value": "circular", "bound": "norm", "tau": "learned",
    "tau_init": 1.0, "attn_radius_init": 10.0, "ff_radius_init": 10.0, "value_init": 1.0, "omega_base": 10000.0,
    "self_coupling": True, "phase_lag": False, "phase_lag_spread": 0.0, "content_lag": False, "coupling_lag": False,
    "value_lag": False, "clock": 0, "clock_init": 0.0, "clock_log_weight": False, "step_gate": False,
    "fp32_attention": False, "readout_gain": "none", "readout_gain_init": 1.0, "readout_harmonics": 1,
    "readout_tied": False, "init_std": 0.02, "embed_spread": 1.0, "context": 32,
}


def test_a_checkpoint_of_the_old_layout_loads_and_a_retired_one_names_its_commit(tmp_path):
    """The tensors kept their names; the config upgrades (flat -> nested, renamed and retired fields)."""
    import pytest

    from kuramoto_attention import KuramotoLM
    from kuramoto_attention.errors import ConfigError
    from kuramoto_attention.models.presets import build_model, get_preset

    torch.manual_seed(0)
    model = build_model(*get_preset("ka-tiny"))
    model.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps(OLD_CONFIG))
    loaded = KuramotoLM.from_pretrained(tmp_path)
    assert loaded.config == model.config
    idx = torch.randint(0, 256, (1, 8))
    assert torch.equal(loaded(idx), model(idx))
    (tmp_path / "config.json").write_text(json.dumps({**OLD_CONFIG, "readout_tied": True}))
    with pytest.raises(ConfigError, match="git checkout 7d67ce1"):
        KuramotoLM.from_pretrained(tmp_path)
