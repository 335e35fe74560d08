"""The example client/python/examples/train_tiny.py, run as a user runs it (a local cluster of
its own): it trains, and its final loss is below its first."""

import json
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "train_tiny.py")


class TrainTinyTest(unittest.TestCase):

    def test_the_loss_falls(self):
        run = subprocess.run(
            [sys.executable, EXAMPLE, "--bin_dir=" + os.environ.get("PS_BIN_DIR", "bazel-bin"),
             "--steps=200", "--log_every=50", "--seed=3"],
            capture_output=True, text=True, timeout=300)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        lines = run.stdout.splitlines()
        self.assertEqual(len([l for l in lines if l.startswith("step ")]), 4, run.stdout)
        self.assertTrue(lines[-1].startswith("RESULT "), run.stdout)
        result = json.loads(lines[-1][len("RESULT "):])
        print(lines[-1])
        self.assertEqual(result["steps"], 200)
        self.assertLess(result["final_loss"], result["initial_loss"])
        self.assertGreater(result["final_loss"], result["teacher_loss"] - 0.05)


if __name__ == "__main__":
    unittest.main()
