#!/usr/bin/python3
"""The training report of one run: plots of the workers' metrics and an HTML page around them.

    deploy/report/report.py RUN_FOLDER [-o report.html] [--dpi=100]

RUN_FOLDER is a run folder of ps_launch (out/quickstart/, out/runs/<job>-<date>-<time>/): the
workers' JSON-lines metrics (`--metrics_file`: metrics<rank>.jsonl in the folder, or in its logs/
as the SLURM backend writes them), logs/worker0.log (worker 0's `RESULT {json}` line) and
job.pbtxt. Any folder laid out that way will do.

Draws loss, running AUC, samples/s and the pull and push latency, each over steps and over the
seconds since the worker started, one line per worker (rank), into PNG files beside the HTML
(`<html name>_loss.png`, ...), and writes the HTML page: the images, the final RESULT figures in
a table, every worker's last line, and the job file's text.

Exits 0 with the page's path on stdout; exits 1 with `report: what is wrong` on stderr when there
is nothing to report (no such folder, no metrics file, only empty ones) or a metrics line cannot
be read (naming the file and the line). Runs with Debian's /usr/bin/python3 and
python3-matplotlib (deploy/setup.sh installs it), on matplotlib's Agg backend: no display needed.
"""

import argparse
import glob
import html
import json
import math
import os
import re
import sys

# The metrics a worker writes each progress interval (worker/trainer.cc), in the order they are
# drawn: field, title, y axis label, whether the axis starts at 0.
PLOTS = [
    ("loss", "Training loss", "log loss (mean of the interval's batches)", False),
    ("auc", "Running AUC", "AUC (of the interval's batches)", False),
    ("samples_per_s", "Throughput", "samples/s (of the interval)", True),
    ("pull_ms", "Pull latency", "ms per step (mean of the interval)", True),
    ("push_ms", "Push latency", "ms per step (mean of the interval)", True),
]
# Fields every metrics line must carry; the plotted ones may be missing or null (a gap).
REQUIRED = ("rank", "step", "seconds")

# The figures of the RESULT table, in this order; any other field of the line follows them.
RESULT_ORDER = [
    "heldout_auc", "heldout_logloss", "best_heldout_auc", "final_loss", "samples_per_s",
    "seconds", "steps", "samples", "workers", "servers", "backend", "mean_batch", "mean_pull_ms",
    "mean_push_ms", "heldout_samples", "evaluations", "stopped_early_at", "skipped_lines",
    "checkpoint",
]

# The worker prints its figures with printf: a NaN or an infinity comes out as a bare nan, -nan
# or inf, which JSON does not know. They are read as "no value".
_NON_FINITE = re.compile(r"(?<=[:\[,])(\s*)-?(?:nan|inf)\b", re.IGNORECASE)


class ReportError(Exception):
    """Something in the run folder that makes a report impossible; the message says what."""


def metrics_files(run_dir):
    """The metrics files of a run: metrics*.jsonl in the folder and in its logs/, sorted."""
    found = []
    for sub in ("", "logs"):
        found += glob.glob(os.path.join(run_dir, sub, "metrics*.jsonl"))
    return sorted(set(found), key=_natural_key)


def _natural_key(path):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", path)]


def _number(value):
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("not a number: %r" % (value,))
    return float(value)


def read_metrics(paths):
    """Reads metrics lines into {rank: {field: [values...]}} in the order written.

    Raises ReportError naming the file and line of a line that is not a JSON object, lacks a
    required field or has a value that is not a number. Blank lines are skipped.
    """
    by_rank = {}
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = "%s:%d" % (path, number)
                try:
                    record = json.loads(_NON_FINITE.sub(r"\1null", line.strip()))
                except ValueError as e:
                    raise ReportError("%s: not a JSON line (%s): %s" % (where, _why(e), _clip(line)))
                if not isinstance(record, dict):
                    raise ReportError("%s: not a JSON object: %s" % (where, _clip(line)))
                missing = [k for k in REQUIRED if k not in record]
                if missing:
                    raise ReportError("%s: no %s in %s" % (where, ", ".join(missing), _clip(line)))
                try:
                    rank = int(_number(record["rank"]))
                    row = {k: _number(record[k]) for k in ("step", "seconds")}
                    for field, _, _, _ in PLOTS:
                        row[field] = _number(record.get(field))
                except ValueError as e:
                    raise ReportError("%s: %s in %s" % (where, e, _clip(line)))
                series = by_rank.setdefault(rank, {"file": path})
                for k, v in row.items():
                    series.setdefault(k, []).append(v)
    return by_rank


def _why(error):
    """A JSON parse error without its line number (always 1: one line is parsed at a time)."""
    if isinstance(error, json.JSONDecodeError):
        return "%s at column %d" % (error.msg.lower(), error.colno)
    return str(error)


def _clip(line, limit=200):
    line = line.rstrip("\n")
    return line if len(line) <= limit else line[:limit] + "..."


def read_result(run_dir):
    """Worker 0's last `RESULT {json}` line from its log: (dict or None, where it was found).

    Raises ReportError naming the file and line when that line is not a JSON object.
    """
    candidates = [os.path.join(run_dir, "logs", "worker0.log"), os.path.join(run_dir, "worker0.log")]
    for path in candidates:
        if not os.path.isfile(path):
            continue
        found = None
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if line.startswith("RESULT "):
                    found = (number, line[len("RESULT "):])
        if found is None:
            return None, path
        where = "%s:%d" % (path, found[0])
        try:
            result = json.loads(_NON_FINITE.sub(r"\1null", found[1].strip()))
        except ValueError as e:
            raise ReportError("%s: the RESULT line is not JSON (%s): %s" % (where, _why(e), _clip(found[1])))
        if not isinstance(result, dict):
            raise ReportError("%s: the RESULT line is not a JSON object" % where)
        return result, where
    return None, None


def draw(by_rank, out_dir, stem, dpi):
    """One PNG per metric, two panels (over steps, over seconds), one line per rank.

    Returns [(field, title, file name)] in PLOTS' order.
    """
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise ReportError("cannot import matplotlib (%s): run with Debian's /usr/bin/python3 "
                          "and python3-matplotlib (deploy/setup.sh installs it)" % e)

    images = []
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for field, title, ylabel, from_zero in PLOTS:
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.4), dpi=dpi, sharey=True)
        for i, rank in enumerate(sorted(by_rank)):
            series = by_rank[rank]
            n = len(series["step"])
            # A worker with a few lines shows its points; a single one is only a point.
            style = {"marker": "o", "markersize": 7 if n == 1 else 3} if n <= 40 else {}
            for ax, x in zip(axes, ("step", "seconds")):
                ax.plot(series[x], series[field], label="worker %d" % rank,
                        color=colors[i % len(colors)], linewidth=1.4, **style)
        for ax, xlabel in zip(axes, ("step", "seconds since the worker started")):
            ax.set_xlabel(xlabel)
            ax.grid(True, alpha=0.3)
        axes[0].set_ylabel(ylabel)
        if from_zero:
            axes[0].set_ylim(bottom=0)
        axes[0].set_title(title + " over steps", fontsize=10)
        axes[1].set_title(title + " over time", fontsize=10)
        axes[1].legend(fontsize=8, loc="best")
        fig.tight_layout()
        name = "%s_%s.png" % (stem, field)
        fig.savefig(os.path.join(out_dir, name), dpi=dpi)
        plt.close(fig)
        images.append((field, title, name))
    return images


def _fmt(value):
    """A RESULT figure as the worker wrote it (JSON's shortest form); "-" for none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, (dict, list)):
        return json.dumps(value)
    return str(value)


def _short(value):
    """A worker's figure for its table: 4 significant digits, whole numbers from 1000."""
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return "%.0f" % value if abs(value) >= 1000 else "%.4g" % value
    return str(value)


def write_html(path, run_dir, by_rank, images, result, result_where, texts):
    e = html.escape
    out = []
    out.append("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">")
    out.append("<title>Training report: %s</title>" % e(run_dir))
    out.append("<style>body{font-family:sans-serif;margin:1.5em;max-width:1100px}"
               "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;"
               "text-align:right}th{background:#f3f3f3}td.k{text-align:left}"
               "pre{background:#f7f7f7;padding:8px;overflow-x:auto}img{max-width:100%}</style>")
    out.append("</head><body>")
    out.append("<h1>Training report</h1>")
    out.append("<p>Run folder: <code>%s</code></p>" % e(os.path.abspath(run_dir)))

    out.append("<h2>Result</h2>")
    if result is None:
        where = (" in <code>%s</code>" % e(result_where)) if result_where else ""
        out.append("<p id=\"no-result\">No RESULT line%s: the run has not finished, or "
                   "worker 0 failed (see its log).</p>" % where)
    else:
        keys = [k for k in RESULT_ORDER if k in result] + sorted(k for k in result if k not in RESULT_ORDER)
        out.append("<p>Worker 0's RESULT line (<code>%s</code>):</p>" % e(result_where))
        out.append("<table id=\"result\"><tr><th>figure</th><th>value</th></tr>")
        for k in keys:
            out.append("<tr><td class=\"k\">%s</td><td>%s</td></tr>" % (e(k), e(_fmt(result[k]))))
        out.append("</table>")

    out.append("<h2>Workers</h2>")
    out.append("<table id=\"workers\"><tr><th>rank</th><th>lines</th><th>last step</th>"
               "<th>seconds</th><th>last loss</th><th>last AUC</th><th>mean samples/s</th>"
               "<th>pull ms</th><th>push ms</th><th>file</th></tr>")
    for rank in sorted(by_rank):
        s = by_rank[rank]
        rates = [v for v in s["samples_per_s"] if not math.isnan(v)]
        cells = [rank, len(s["step"]), int(s["step"][-1]), s["seconds"][-1], s["loss"][-1],
                 s["auc"][-1], sum(rates) / len(rates) if rates else math.nan, s["pull_ms"][-1],
                 s["push_ms"][-1]]
        out.append("<tr>%s<td class=\"k\"><code>%s</code></td></tr>" % (
            "".join("<td>%s</td>" % e(_short(c)) for c in cells), e(os.path.relpath(s["file"], run_dir))))
    out.append("</table>")
    out.append("<p>Loss and AUC are each interval's own (the batches since the worker's previous "
               "line); samples/s is the interval's rate; pull and push latency are the mean per "
               "step over the interval.</p>")

    out.append("<h2>Plots</h2>")
    for field, title, name in images:
        out.append("<h3>%s</h3>" % e(title))
        out.append("<img src=\"%s\" alt=\"%s\">" % (e(name, quote=True), e(title, quote=True)))

    for title, file_path, text in texts:
        out.append("<h2>%s</h2>" % e(title))
        out.append("<p><code>%s</code></p>" % e(file_path))
        out.append("<pre>%s</pre>" % e(text))
    out.append("</body></html>\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out))


def _ssh_hint(run_dir):
    """Where an SSH run's workers wrote their metrics (on their own hosts), from run.pbtxt."""
    try:
        with open(os.path.join(run_dir, "run.pbtxt"), encoding="utf-8") as f:
            run = f.read()
    except OSError:
        return ""
    backend = re.search(r"^backend:\s*(\w+)", run, re.M)
    remote = re.search(r'^remote_dir:\s*"([^"]*)"', run, re.M)
    if not backend or backend.group(1) != "SSH" or not remote:
        return ""
    return ("; this is an SSH run: each worker wrote its file on its own host, as %s/metrics<rank>"
            ".jsonl; copy them here (scp HOST:%s/metrics*.jsonl %s/)"
            % (remote.group(1), remote.group(1), run_dir))


def make_report(run_dir, output=None, dpi=100):
    """Writes the report of run_dir to output (default run_dir/report.html); returns its path."""
    if not os.path.isdir(run_dir):
        raise ReportError("%s: no such folder" % run_dir)
    paths = metrics_files(run_dir)
    if not paths:
        raise ReportError("%s: no metrics files (metrics*.jsonl, written by the workers' "
                          "--metrics_file) in the folder or its logs/%s" % (run_dir, _ssh_hint(run_dir)))
    by_rank = read_metrics(paths)
    if not by_rank:
        raise ReportError("%s: the metrics files hold no lines (%s): did the workers run a step?"
                          % (run_dir, ", ".join(os.path.basename(p) for p in paths)))
    result, result_where = read_result(run_dir)
    texts = []
    for title, name in (("Job", "job.pbtxt"), ("Cluster", "cluster.pbtxt")):
        p = os.path.join(run_dir, name)
        if os.path.isfile(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                texts.append((title, p, f.read()))

    output = output or os.path.join(run_dir, "report.html")
    out_dir = os.path.dirname(os.path.abspath(output))
    os.makedirs(out_dir, exist_ok=True)
    stem = os.path.splitext(os.path.basename(output))[0]
    images = draw(by_rank, out_dir, stem, dpi)
    write_html(output, run_dir, by_rank, images, result, result_where, texts)
    return output


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="report.py", description="Plots a run's worker metrics into an HTML report.")
    parser.add_argument("run_dir", metavar="RUN_FOLDER", help="a ps_launch run folder")
    parser.add_argument("-o", "--output", help="the HTML file (default RUN_FOLDER/report.html); "
                        "the images go beside it")
    parser.add_argument("--dpi", type=int, default=100, help="resolution of the images (100)")
    args = parser.parse_args(argv)
    try:
        path = make_report(args.run_dir, args.output, args.dpi)
    except ReportError as e:
        print("report: %s" % e, file=sys.stderr)
        return 1
    except OSError as e:
        print("report: %s" % e, file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
