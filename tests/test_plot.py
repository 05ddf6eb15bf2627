"""The ranking SVG parses and shows points, labels, the SLA line and the chosen GPU."""
import xml.etree.ElementTree as ET

from click.testing import CliRunner

from wattgpu import Workload, rank
from wattgpu.cli import main
from wattgpu.plot import render_svg

NS = "{http://www.w3.org/2000/svg}"
LLM = "meta-llama/Llama-3.1-8B-Instruct"


def _classes(el):
    return set((el.get("class") or "").split())


def test_svg_structure(tmp_path):
    res = rank(LLM, Workload(kind="server", qps=0.017), max_itl_ms=50)
    root = ET.fromstring(render_svg(res))
    assert root.tag == NS + "svg"
    points = [c for c in root.iter(NS + "circle") if "point" in _classes(c)]
    misses = [e for e in res.excluded if e.entry is not None]
    assert len(points) == len(res.candidates) + len(misses)
    assert {p.get("data-gpu") for p in points if "candidate" in _classes(p)} == {c.gpu for c in res.candidates}
    labels = [t for t in root.iter(NS + "text") if "label" in _classes(t)]
    assert labels and any("best" in (t.text or "") for t in labels)
    ids = {el.get("id") for el in root.iter()}
    assert {"sla", "best", "x-axis", "y-axis", "title"} <= ids
    sla = [el for el in root.iter() if el.get("id") == "sla"][0]
    line = sla.find(NS + "line")
    assert line.get("x1") == line.get("x2")  # vertical
    axis_text = " ".join(t.text or "" for t in root.iter(NS + "text"))
    assert "(ms)" in axis_text and "(J, log scale)" in axis_text
    # labels do not overprint each other
    boxes = [(float(t.get("x")), float(t.get("y")), len(t.text) * 6.2) for t in labels]
    for i, (x1, y1, w1) in enumerate(boxes):
        for x2, y2, w2 in boxes[i + 1:]:
            assert not (abs(y1 - y2) < 12 and x1 < x2 + w2 and x2 < x1 + w1)


def test_cli_plot_writes_file(tmp_path):
    out = tmp_path / "r.svg"
    r = CliRunner().invoke(main, ["rank", "--llm", LLM, "--gpus", "NVIDIA A30,NVIDIA L4,NVIDIA H100 SXM5 80GB",
                                  "--max-itl-ms", "50", "--workload", "server", "--qps", "0.017", "--plot", str(out)])
    assert r.exit_code == 0, r.output
    root = ET.parse(out).getroot()
    assert len([c for c in root.iter(NS + "circle") if "point" in _classes(c)]) == 3


def test_plot_path_must_name_an_svg_and_fails_before_any_work(tmp_path):
    """An SVG written under plot.png opens as a broken image, and a blank name wrote nothing silently."""
    for name, words in (("plot.png", "give the file a .svg name"), (" ", "blank path"), ("", "empty path")):
        path = name if not name.strip() else str(tmp_path / name)
        r = CliRunner().invoke(main, ["rank", "--llm", "meta-llama/Llama-3.1-8B-Instruct", "--plot", path])
        assert r.exit_code == 2 and words in r.stderr and not (tmp_path / "plot.png").exists(), r.stderr
        assert r.stdout == ""  # refused before the ranking was printed
    ok = tmp_path / "Plot.SVG"
    r = CliRunner().invoke(main, ["rank", "--llm", "meta-llama/Llama-3.1-8B-Instruct", "--plot", str(ok)])
    assert r.exit_code == 0 and ok.read_text().startswith("<svg")
