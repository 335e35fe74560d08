#!/usr/bin/python3
"""Tests of report.py on run folders made up here: what it draws and writes, and every bad input.

report.py runs as a program (its exit status and messages are what users see), on folders laid
out as ps_launch lays them out. real_run_test.sh does the same on a real training run.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT = os.path.join(HERE, "report.py")
sys.path.insert(0, HERE)
import report_check  # noqa: E402

RESULT = {"backend": "cpu", "rank": 0, "workers": 2, "servers": 2, "steps": 12,
          "samples": 6144, "samples_per_s": 98302.5, "seconds": 1.25, "final_loss": 0.51,
          "heldout_auc": 0.804466, "heldout_logloss": 0.478971, "best_heldout_auc": None}


def line(rank, step, **more):
    """A metrics line as worker/trainer.cc writes it; `more` replaces or adds fields."""
    # Each rank's figures differ, so that no line hides another.
    record = {"rank": rank, "step": step, "batch": 256, "seconds": round(0.1 * step, 3),
              "samples_per_s": 10000.0 + 100 * step - 1000 * rank,
              "loss": round(0.6 - 0.01 * step + 0.02 * rank, 6),
              "auc": round(0.7 + 0.01 * step - 0.03 * rank, 6), "pull_ms": 2.0 + rank + 0.1 * step,
              "push_ms": 3.0 + rank - 0.1 * step}
    record.update(more)
    return json.dumps(record, separators=(",", ":"))


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


class ReportTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.run_dir = os.path.join(self.dir, "run")
        os.makedirs(os.path.join(self.run_dir, "logs"))

    def tearDown(self):
        shutil.rmtree(self.dir)

    def write(self, name, lines):
        path = os.path.join(self.run_dir, name)
        with open(path, "w") as f:
            f.write("".join(l + "\n" for l in lines))
        return path

    def two_workers(self, steps=12):
        self.write("metrics0.jsonl", [line(0, s) for s in range(1, steps + 1)])
        self.write("metrics1.jsonl", [line(1, s) for s in range(1, steps + 1)])

    def report(self, *args):
        """Runs report.py; returns (exit status, stdout, stderr)."""
        env = dict(os.environ, MPLCONFIGDIR=self.dir)
        p = subprocess.run([sys.executable, REPORT] + list(args), capture_output=True, text=True,
                           env=env, timeout=120)
        return p.returncode, p.stdout, p.stderr

    def assert_fails(self, expected, *args):
        rc, out, err = self.report(*(args or (self.run_dir,)))
        self.assertEqual(rc, 1, "exit status %d, stderr: %s" % (rc, err))
        self.assertTrue(err.startswith("report: "), err)
        self.assertIn(expected, err)
        self.assertEqual(out, "")
        self.assertFalse(os.path.exists(os.path.join(self.run_dir, "report.html")))
        return err

    # --- What it draws and writes.

    def test_two_workers_every_image_and_the_result(self):
        self.two_workers()
        self.write("logs/worker0.log", ["worker 0: step 12/12 ...",
                                        "RESULT " + json.dumps(RESULT)])
        self.write("job.pbtxt", ['name: "quickstart"  # <b>not bold</b> & "quoted"'])
        rc, out, err = self.report(self.run_dir)
        self.assertEqual(rc, 0, err)
        html_path = os.path.join(self.run_dir, "report.html")
        self.assertEqual(out.strip(), html_path)
        for done in report_check.check_report(html_path, [0, 1], expect_result=True):
            print("ok: " + done)
        page = read(html_path)
        # The job file's text, escaped.
        self.assertIn("# &lt;b&gt;not bold&lt;/b&gt; &amp; &quot;quoted&quot;", page)
        self.assertNotIn("<b>not bold</b>", page)
        # Every figure of the RESULT line, a null as "-".
        self.assertIn('<td class="k">best_heldout_auc</td><td>-</td>', page)
        self.assertIn('<td class="k">samples_per_s</td><td>98302.5</td>', page)
        self.assertIn('<td class="k">backend</td><td>cpu</td>', page)

    def test_a_worker_with_a_single_line_still_plots(self):
        self.write("metrics0.jsonl", [line(0, s) for s in range(1, 30)])
        self.write("metrics1.jsonl", [line(1, 1)])
        rc, _, err = self.report(self.run_dir)
        self.assertEqual(rc, 0, err)
        # Worker 1's colour in both panels of every image: its single point is drawn.
        report_check.check_report(os.path.join(self.run_dir, "report.html"), [0, 1], False)

    def test_only_one_worker_with_one_line(self):
        self.write("metrics0.jsonl", [line(0, 1)])
        rc, _, err = self.report(self.run_dir)
        self.assertEqual(rc, 0, err)
        report_check.check_report(os.path.join(self.run_dir, "report.html"), [0], False)

    def test_output_elsewhere_puts_the_images_beside_it(self):
        self.two_workers()
        out = os.path.join(self.dir, "elsewhere", "ex.html")
        rc, stdout, err = self.report(self.run_dir, "-o", out, "--dpi=60")
        self.assertEqual(rc, 0, err)
        self.assertEqual(stdout.strip(), out)
        names = sorted(os.listdir(os.path.dirname(out)))
        self.assertEqual(names, sorted(["ex.html"] + ["ex_%s.png" % m for m in report_check.METRICS]))
        w, h = report_check.check_png(os.path.join(self.dir, "elsewhere", "ex_loss.png"))
        self.assertEqual((w, h), (600, 204))  # 10 x 3.4 inches at 60 dpi

    def test_metrics_in_logs_as_slurm_writes_them(self):
        os.rename(self.write("metrics0.jsonl", [line(0, s) for s in range(1, 5)]),
                  os.path.join(self.run_dir, "logs", "metrics0.jsonl"))
        rc, _, err = self.report(self.run_dir)
        self.assertEqual(rc, 0, err)

    def test_no_result_line_is_said(self):
        self.two_workers()
        self.write("logs/worker0.log", ["worker 0: step 5/12 ..."])
        rc, _, err = self.report(self.run_dir)
        self.assertEqual(rc, 0, err)
        page = read(os.path.join(self.run_dir, "report.html"))
        self.assertIn('id="no-result"', page)
        self.assertNotIn('id="result"', page)

    def test_nan_and_null_figures_are_gaps(self):
        # printf writes a NaN as nan or -nan: read as no value, not as a broken line.
        self.write("metrics0.jsonl", [line(0, 1).replace('"auc":0.71', '"auc":nan'),
                                      line(0, 2).replace('"auc":0.72', '"auc":-nan'),
                                      line(0, 3, auc=None), line(0, 4, push_ms=None)])
        rc, _, err = self.report(self.run_dir)
        self.assertEqual(rc, 0, err)

    # --- Bad input: exit status 1, and a message that says what and where.

    def test_no_such_folder(self):
        self.assert_fails("no such folder", os.path.join(self.dir, "missing"))

    def test_a_folder_without_metrics_files(self):
        self.write("logs/worker0.log", ["RESULT " + json.dumps(RESULT)])
        self.assert_fails("no metrics files (metrics*.jsonl")

    def test_an_ssh_run_says_where_its_metrics_are(self):
        self.write("run.pbtxt", ['job_name: "quickstart"', "backend: SSH", "launcher_pid: 7",
                                 'remote_dir: "/tmp/ps_launch/quickstart-1"'])
        self.assert_fails("an SSH run: each worker wrote its file on its own host, as "
                          "/tmp/ps_launch/quickstart-1/metrics<rank>.jsonl")

    def test_only_empty_metrics_files(self):
        self.write("metrics0.jsonl", [])
        self.write("metrics1.jsonl", [""])
        self.assert_fails("the metrics files hold no lines (metrics0.jsonl, metrics1.jsonl)")

    def test_a_broken_line_names_its_file_and_line(self):
        self.two_workers()
        lines = read(os.path.join(self.run_dir, "metrics1.jsonl")).splitlines()
        lines[6] = lines[6][:40]  # cut short
        path = self.write("metrics1.jsonl", lines)
        err = self.assert_fails("%s:7: not a JSON line" % path)
        self.assertIn(lines[6], err)

    def test_a_line_that_is_not_an_object(self):
        path = self.write("metrics0.jsonl", [line(0, 1), "[1, 2, 3]"])
        self.assert_fails("%s:2: not a JSON object" % path)

    def test_a_line_without_a_step(self):
        path = self.write("metrics0.jsonl", [line(0, 1), '{"rank":0,"seconds":1.5,"loss":0.5}'])
        self.assert_fails("%s:2: no step in" % path)

    def test_a_figure_that_is_not_a_number(self):
        path = self.write("metrics0.jsonl", [line(0, 1), line(0, 2, loss="high")])
        self.assert_fails("%s:2: not a number: 'high'" % path)

    def test_a_broken_result_line(self):
        self.two_workers()
        path = self.write("logs/worker0.log", ["worker 0: step 12/12", 'RESULT {"heldout_auc":0.8'])
        self.assert_fails("%s:2: the RESULT line is not JSON" % path)


class PngCheckTest(unittest.TestCase):
    """The PNG check itself refuses what it must (so that a pass means something)."""

    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        import numpy as np
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig = plt.figure(figsize=(4, 3), dpi=50)
        plt.plot(np.arange(10), np.arange(10) ** 2)
        self.good = os.path.join(self.dir, "good.png")
        fig.savefig(self.good)
        plt.close(fig)
        with open(self.good, "rb") as f:
            self.data = f.read()

    def tearDown(self):
        shutil.rmtree(self.dir)

    def variant(self, data):
        path = os.path.join(self.dir, "bad.png")
        with open(path, "wb") as f:
            f.write(data)
        return path

    def test_good(self):
        self.assertEqual(report_check.check_png(self.good), (200, 150))

    def test_refusals(self):
        import struct
        import zlib
        iend = self.data.rindex(b"IEND") - 4
        # An IHDR of width 0 with a right CRC.
        ihdr = b"IHDR" + b"\0\0\0\0" + self.data[20:29]
        zero_width = self.data[:12] + ihdr + struct.pack(">I", zlib.crc32(ihdr)) + self.data[33:]
        # The image data cut short, every CRC right.
        start = self.data.index(b"IDAT") - 4
        (length,) = struct.unpack(">I", self.data[start:start + 4])
        body = zlib.compress(zlib.decompress(self.data[start + 8:start + 8 + length])[:-100])
        short_idat = (self.data[:start] + struct.pack(">I", len(body)) + b"IDAT" + body +
                      struct.pack(">I", zlib.crc32(b"IDAT" + body)) + self.data[start + 12 + length:])
        cases = {
            "tiny": b"\x89PNG\r\n\x1a\n",
            "no PNG signature": b"GIF89a" + self.data[6:],
            "no IEND": self.data[:iend],
            "wrong CRC": self.data[:40] + bytes([self.data[40] ^ 1]) + self.data[41:],
            "IHDR says 0x": zero_width,
            "IDAT short of the rows": short_idat,
        }
        for what, data in cases.items():
            with self.subTest(what):
                with self.assertRaises(report_check.CheckError) as e:
                    report_check.check_png(self.variant(data), min_bytes=5)
                print("refused (%s): %s" % (what, e.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
