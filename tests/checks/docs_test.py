#!/usr/bin/python3
"""Checks of the documentation, on the sources alone (no build, no mount):

  docs_test.py links  REPO   every relative link of README.md, bench/README.md and docs/**/*.md
                             resolves: the
                             file exists and a #anchor names a heading of the file it points at;
                             docs/benchmarks.md links every report in bench/results/KIND/ (a .md,
                             or a .jsonl that has none)
  docs_test.py charts REPO   every chart (.svg) those pages link exists and was drawn from the
                             data its results file holds now: bench/lib/plot.py writes each source's
                             sha256 into the SVG's metadata; so does every chart beside a .jsonl
  docs_test.py redraw REPO   bench/lib/plot.py, run again on the README chart's sources in a scratch
                             directory, draws the committed bytes (deterministic SVGs: drawing
                             again changes nothing); skipped (77) without python3-matplotlib

Content hashes, not file times: on a fresh clone every file has the checkout's time. One line
per problem, exit status 1 if any.
"""
import hashlib
import os
import re
import sys

LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
SOURCE = re.compile(r"([\w.-]+\.jsonl) sha256:([0-9a-f]{64})")


def pages(repo):
    out = [os.path.join(repo, "README.md"), os.path.join(repo, "bench", "README.md")]
    for root, _, files in os.walk(os.path.join(repo, "docs")):
        out += [os.path.join(root, f) for f in sorted(files) if f.endswith(".md")]
    return out


def strip_code(text):
    """The text outside fenced code blocks and inline code spans."""
    text = re.sub(r"^```.*?^```[ \t]*$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def slug(heading):
    """GitHub's anchor of a heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    text = re.sub(r"^```.*?^```[ \t]*$", "", text, flags=re.S | re.M)
    seen, out = {}, set()
    for m in re.finditer(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path):
    with open(path, encoding="utf-8") as f:
        text = strip_code(f.read())
    for m in LINK.finditer(text):
        target = m.group(1)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, mailto:, ...
            continue
        yield target


def check_links(repo):
    problems = []
    for page in pages(repo):
        rel = os.path.relpath(page, repo)
        for target in links(page):
            file_part, _, anchor = target.partition("#")
            dest = page if not file_part else os.path.normpath(
                os.path.join(os.path.dirname(page), file_part))
            if not os.path.exists(dest):
                problems.append(f"{rel}: link to {target}: {os.path.relpath(dest, repo)} "
                                "does not exist")
                continue
            if anchor and (not dest.endswith(".md") or anchor not in anchors(dest)):
                problems.append(f"{rel}: link to {target}: no heading #{anchor} in "
                                f"{os.path.relpath(dest, repo)}")
    return problems


def check_results_listed(repo):
    page = os.path.join(repo, "docs", "benchmarks.md")
    linked = {os.path.normpath(os.path.join(os.path.dirname(page), t.partition("#")[0]))
              for t in links(page)}
    problems = []
    for name, path in sorted(results_files(repo).items()):
        report = name.endswith(".md") or (name.endswith(".jsonl")
                                          and not os.path.exists(path[:-len(".jsonl")] + ".md"))
        if report and path not in linked:
            problems.append(f"docs/benchmarks.md: no link to {os.path.relpath(path, repo)} "
                            "(its table \"Every results file\")")
    return problems


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def results_files(repo):
    """Every file of bench/results/ by name: the reports, their .jsonl and charts lie in one
    folder per kind (bench/results/KIND/), the README's chart in bench/results/ itself."""
    results = os.path.join(repo, "bench", "results")
    out = {}
    for root, _, files in os.walk(results):
        for f in files:
            out.setdefault(f, os.path.join(root, f))
    return out


def check_chart(repo, svg, why):
    rel = os.path.relpath(svg, repo)
    if not os.path.exists(svg):
        return [f"{rel} ({why}) does not exist: run /usr/bin/python3 bench/lib/plot.py"]
    with open(svg, encoding="utf-8") as f:
        sources = SOURCE.findall(f.read())
    if not sources:
        return [f"{rel} ({why}) names no sources: draw it with bench/lib/plot.py"]
    problems = []
    for name, digest in sources:
        # An SVG names its sources by file name: beside it, or (the README's chart) in the
        # kind's folder.
        data = os.path.join(os.path.dirname(svg), name)
        if not os.path.exists(data):
            data = results_files(repo).get(name, data)
        if not os.path.exists(data):
            problems.append(f"{rel}: its source {name} does not exist")
        elif sha256(data) != digest:
            problems.append(f"{rel} is older than {name} (drawn from other data): run "
                            "/usr/bin/python3 bench/lib/plot.py")
    return problems


def check_charts(repo):
    problems, charts = [], {}
    for page in pages(repo):
        for target in links(page):
            file_part = target.partition("#")[0]
            if file_part.endswith(".svg"):
                path = os.path.normpath(os.path.join(os.path.dirname(page), file_part))
                charts.setdefault(path, f"linked from {os.path.relpath(page, repo)}")
    if not charts:
        problems.append("README.md and docs/ link no chart")
    for name, path in sorted(results_files(repo).items()):
        if name.endswith(".svg") and os.path.exists(path[:-4] + ".jsonl"):
            charts.setdefault(path, "beside its .jsonl")
    for path, why in sorted(charts.items()):
        problems += check_chart(repo, path, why)
    return problems


def check_redraw(repo):
    import shutil
    import subprocess
    import tempfile
    results = os.path.join(repo, "bench", "results")
    headline = os.path.join(results, "headline.svg")
    with open(headline, encoding="utf-8") as f:
        sources = [name for name, _ in SOURCE.findall(f.read())]
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in results_files(repo).items():
            if name.endswith((".jsonl", ".md")):
                kind = os.path.relpath(os.path.dirname(path), results)
                os.makedirs(os.path.join(tmp, kind), exist_ok=True)
                shutil.copy(path, os.path.join(tmp, kind))
        drawn = [os.path.join(tmp, "views", n) for n in sources if n.startswith("views-")]
        p = subprocess.run([sys.executable, os.path.join(repo, "bench", "lib", "plot.py"),
                            "--results", tmp] + drawn, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        if "python3-matplotlib is not installed" in p.stdout:
            print("skipped: python3-matplotlib is not installed (bash scripts/setup.sh)")
            sys.exit(77)
        if p.returncode != 0:
            return [f"bench/lib/plot.py failed (status {p.returncode}): {p.stdout.strip()}"]
        problems = check_gpu_chart(repo, tmp)
        for name in ["headline.svg"] + [os.path.join("views", os.path.basename(d)[:-6] + ".svg")
                                        for d in drawn]:
            new, old = os.path.join(tmp, name), os.path.join(results, name)
            if not os.path.exists(new):
                problems.append(f"bench/lib/plot.py drew no {name}")
            elif sha256(new) != sha256(old):
                problems.append(f"bench/results/{name}: drawn again from the same data it "
                                "differs (not deterministic, or drawn by another plot.py)")
        return problems


def check_gpu_chart(repo, tmp):
    """The GPU host's chart from lines as bench/gpu/gpu_run.sh writes them (no GPU results are
    committed yet: made-up figures, in a temporary directory only)."""
    import json
    import subprocess
    os.makedirs(os.path.join(tmp, "gpu"), exist_ok=True)
    path = os.path.join(tmp, "gpu", "gpu-20000101-000000.jsonl")
    rows = [("gpu-only", "GPU alone", 0, 59435), ("ram", "whole tree in one tensor on the GPU", 0,
                                                  60147)]
    for w in (16, 4):
        for name, v in (("JPEG on local disk", 43762), ("dsfs original tree", 38625),
                        ("dsfs bmp view", 45195), ("dsfs -o kernel original tree", 44000),
                        ("dsfs -o kernel,view=bmp", 57000)):
            rows.append(("imagefolder", f"ImageFolder, {name}, {w} workers", w, v // (w // 4)))
    with open(path, "w") as f:
        for mode, label, workers, ips in rows:
            f.write(json.dumps({"mode": mode, "label": label, "workers": workers,
                                "images_per_s": ips}) + "\n")
    p = subprocess.run([sys.executable, os.path.join(repo, "bench", "lib", "plot.py"), "--results",
                        tmp, path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    svg = path[:-len(".jsonl")] + ".svg"
    if p.returncode != 0 or not os.path.exists(svg):
        return [f"bench/lib/plot.py drew no chart of GPU results: {p.stdout.strip()}"]
    with open(svg, encoding="utf-8") as f:
        text = f.read()
    return [f"the GPU chart lacks {want!r}" for want in ("GPU alone", "dsfs -o kernel", "16 workers")
            if want not in text]


def main():
    modes = {"links": lambda repo: check_links(repo) + check_results_listed(repo),
             "charts": check_charts, "redraw": check_redraw}
    if len(sys.argv) != 3 or sys.argv[1] not in modes:
        print("usage: docs_test.py links|charts|redraw REPO", file=sys.stderr)
        return 2
    repo = os.path.abspath(sys.argv[2])
    problems = modes[sys.argv[1]](repo)
    for p in problems:
        print(p)
    if not problems:
        print(f"docs_test {sys.argv[1]}: ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
