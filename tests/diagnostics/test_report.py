"""``kuramoto report`` on tiny trained runs (hermetic: a generated text corpus in tmp_path).

The browser test renders the page in headless Chromium when it is installed (Debian:
``apt-get install -y --no-install-recommends chromium``) and is skipped otherwise.
"""

import base64
import json
import random
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from kuramoto_attention.cli import main
from kuramoto_attention.diagnostics.measure import diagnose_run, valid_batch
from kuramoto_attention.diagnostics.report import byte_label, read_metrics
from kuramoto_attention.errors import ConfigError

PNG = b"\x89PNG\r\n\x1a\n"
FIGURES = {"curves", "order", "omega", "attention", "phases", "value_gates"}
CONTEXT = 16


def _train(tmp: Path, preset: str) -> Path:
    rng = random.Random(0)
    words = ["the", "phase", "of", "each", "oscillator", "drifts", "and", "couples", "to", "its", "torus"]
    corpus = tmp / "corpus.txt"
    corpus.write_text(" ".join(rng.choice(words) for _ in range(800)))
    run = tmp / preset
    argv = ["train", "--preset", preset, "--steps", "3", "--eval-every", "2", "--eval-batches", "1",
            "--batch-size", "2", "--context", str(CONTEXT), "--warmup", "1", "--corpus", f"text:{corpus}",
            "--run-dir", str(run), "--no-progress", "--precision", "fp32"]
    assert main(argv) == 0
    return run


@pytest.fixture(scope="module")
def ka_run(tmp_path_factory) -> Path:
    return _train(tmp_path_factory.mktemp("ka"), "ka-tiny")


@pytest.fixture(scope="module")
def ka_report(ka_run) -> Path:
    assert main(["report", str(ka_run), "--batch", "2"]) == 0
    return ka_run / "report" / "report.html"


def _images(page: str) -> list[bytes]:
    return [base64.b64decode(m) for m in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def test_report_writes_self_contained_page(ka_report):
    out = ka_report.parent
    assert {p.stem for p in out.glob("*.png")} == FIGURES
    page = ka_report.read_text(encoding="utf-8")
    images = _images(page)
    assert len(images) == len(FIGURES) == page.count("<img") == page.count("<figcaption>")
    assert all(img.startswith(PNG) for img in images)
    assert sorted(images) == sorted(p.read_bytes() for p in out.glob("*.png"))  # the files are what is embedded
    assert "<script" not in page and not re.search(r'(src|href)="(https?:)?//', page)  # no JS, no network
    data = json.loads((out / "diagnostics.json").read_text())
    assert data["depth"] == 2 and data["batch"] == [2, CONTEXT] and len(data["local_order"]) == 2


def test_cli_prints_page_path_and_honours_out(ka_run, tmp_path, capsys):
    out = tmp_path / "elsewhere"
    assert main(["report", str(ka_run), "--out", str(out), "--batch", "1", "--context", "8"]) == 0
    assert capsys.readouterr().out.strip() == str(out / "report.html")
    assert json.loads((out / "diagnostics.json").read_text())["batch"] == [1, 8]


def test_transformer_run_gets_curves_only(tmp_path, capsys):
    run = _train(tmp_path, "tf-tiny")
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 0
    assert [p.name for p in (tmp_path / "rep").iterdir() if p.suffix != ".html"] == ["curves.png"]
    page = (tmp_path / "rep" / "report.html").read_text(encoding="utf-8")
    assert len(_images(page)) == 1 and "transformer run" in page
    with pytest.raises(ConfigError, match="need a KuramotoLM"):
        diagnose_run(run)


def test_user_mistakes_are_one_line_errors(ka_run, tmp_path, capsys):
    assert main(["report", str(tmp_path / "missing")]) == 2
    assert main(["report", str(ka_run), "--out", str(tmp_path / "r"), "--batch", "0"]) == 2
    assert main(["report", str(ka_run), "--out", str(tmp_path / "r"), "--context", "100000"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith("error: ") for line in err)


def test_valid_batch_reads_evenly_spaced_windows(ka_run):
    from kuramoto_attention.training.data import load_corpus
    from kuramoto_attention.training.train import load_run

    valid = load_corpus(load_run(ka_run, {}).train_cfg.corpus).splits["valid"]
    x = valid_batch(ka_run, batch=3)
    assert x.shape == (3, CONTEXT) and x.dtype == torch.long
    assert x[0].tolist() == valid[:CONTEXT].tolist() and x[-1].tolist() == valid[-CONTEXT:].tolist()


def test_metrics_survive_a_cut_line(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "tokens": 8, "train_bpc": 8.0}\n{"step": 2, "tok')
    assert read_metrics(tmp_path) == [{"step": 1, "tokens": 8, "train_bpc": 8.0}]


def test_byte_labels():
    assert [byte_label(b) for b in b"a \n~\x00"] == ["a", "·", "\\n", "~", "00"]


# --------------------------------------------------------------------------- headless browser
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# Injected into a copy of the page: records script errors, failed resource loads (capture phase)
# and console.error calls, then after the load event writes what it saw into the DOM for --dump-dom.
PROBE = """<script>
var probeErrors = [];
window.addEventListener('error', function (e) {
  probeErrors.push(e.message || ('failed to load ' + ((e.target && e.target.tagName) || '?')));
}, true);
var probeConsoleError = console.error;
console.error = function () { probeErrors.push('console: ' + Array.prototype.join.call(arguments, ' '));
  probeConsoleError.apply(console, arguments); };
window.addEventListener('load', function () {
  var decoded = 0, imgs = document.images;
  for (var i = 0; i < imgs.length; i++) { if (imgs[i].complete && imgs[i].naturalWidth > 0) decoded++; }
  var pre = document.createElement('pre'); pre.id = 'probe';
  pre.textContent = JSON.stringify({images: imgs.length, decoded: decoded, errors: probeErrors});
  document.body.appendChild(pre);
});
</script>"""


def _render(page: str, tmp: Path) -> dict:
    tmp.mkdir(exist_ok=True)
    probe_page = tmp / "probe.html"
    probe_page.write_text(page.replace("<head>", "<head>" + PROBE, 1), encoding="utf-8")
    cmd = [CHROMIUM, *FLAGS, f"--user-data-dir={tmp / 'profile'}", "--virtual-time-budget=5000",
           "--dump-dom", probe_page.as_uri()]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    found = re.search(r'<pre id="probe">(.*?)</pre>', result.stdout, re.S)
    assert found, f"chromium did not render the page (exit {result.returncode}): {result.stderr[-500:]}"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install -y chromium)")
def test_page_renders_in_headless_chromium(ka_report, tmp_path):
    page = ka_report.read_text(encoding="utf-8")
    seen = _render(page, tmp_path)
    assert seen == {"images": len(FIGURES), "decoded": len(FIGURES), "errors": []}
    # the probe itself works: a broken image is reported as not decoded and as a load error
    broken = page.replace("</body>", '<img src="data:image/png;base64,AAAA"></body>')
    seen = _render(broken, tmp_path / "broken")
    assert seen["images"] == len(FIGURES) + 1 and seen["decoded"] == len(FIGURES) and seen["errors"]
