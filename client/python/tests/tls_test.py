"""The Python client against a cluster with mutual TLS and bearer tokens (credentials made by
deploy/make_credentials.sh): with the CA, a client certificate and the worker token it pulls and
pushes; an unknown token is refused UNAUTHENTICATED; a plaintext client gets UNAVAILABLE with the
hint to give tls_ca; and ClientOptions.validate refuses bad security options before dialling."""

import os
import subprocess
import sys
import unittest

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "testing"))

import cluster_case  # noqa: E402
import ps_client  # noqa: E402
from ps_client import security  # noqa: E402

JOB = """
name: "python_tls"
tables { name: "t" dim: 3 initializer { kind: ZEROS } optimizer { type: "sgd" learning_rate: 1 } }
training { seed: 5 mode: ASYNC }
cluster { num_shards: 8 num_servers: 2 }
"""
MAKE_CREDENTIALS = os.path.join(os.environ.get("PS_BIN_DIR", "."), "deploy/make_credentials.sh")
UNKNOWN_TOKEN = "0123456789abcdef0123456789abcdef"


class TlsTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = os.path.join(cluster_case.temp_dir(), "credentials")
        subprocess.run(["bash", MAKE_CREDENTIALS, cls.dir, "localhost", "127.0.0.1"], check=True,
                       stdout=subprocess.DEVNULL, timeout=120)
        daemon_args = ["--tls_cert=" + cls.file("node.pem"), "--tls_key=" + cls.file("node.key"),
                       "--tls_ca=" + cls.file("ca.pem"), "--token_file=" + cls.file("tokens")]
        cls.cluster = cluster_case.start_cluster(JOB, coordinator_args=daemon_args,
                                                 server_args=daemon_args)

    @classmethod
    def tearDownClass(cls):
        cls.cluster.stop()

    @classmethod
    def file(cls, name):
        return os.path.join(cls.dir, name)

    def tls(self, token_file):
        return dict(tls_ca=self.file("ca.pem"), tls_cert=self.file("client.pem"),
                    tls_key=self.file("client.key"), token_file=token_file, connect_timeout=30)

    def test_worker_token_pulls_and_pushes(self):
        rng = np.random.default_rng(7)
        keys = rng.choice(10**6, size=500, replace=False).astype(np.uint64)
        grads = rng.standard_normal((len(keys), 3)).astype(np.float32)
        with ps_client.connect(self.cluster.address,
                               **self.tls(self.file("worker_token"))) as client:
            np.testing.assert_array_equal(client.pull("t", keys), 0)
            self.assertEqual(client.push("t", keys, grads), (0, 0))
            np.testing.assert_array_equal(client.pull("t", keys), -grads)
            self.assertEqual(len(client.shard_map.servers), 2)
        # The admin token (a file without a worker token) is presented as well.
        admin_only = os.path.join(cluster_case.temp_dir(), "admin_only")
        with open(self.file("tokens")) as f, open(admin_only, "w") as out:
            out.writelines(line for line in f if line.startswith("admin"))
        with ps_client.connect(self.cluster.address, **self.tls(admin_only)) as client:
            np.testing.assert_array_equal(client.pull("t", keys), -grads)

    def test_unknown_token_is_unauthenticated(self):
        wrong = os.path.join(cluster_case.temp_dir(), "wrong_token")
        with open(wrong, "w") as f:
            f.write("# not the cluster's\nworker %s\n" % UNKNOWN_TOKEN)
        with self.assertRaises(ps_client.UnauthenticatedError) as e:
            ps_client.connect(self.cluster.address, **self.tls(wrong))
        self.assertNotIn(UNKNOWN_TOKEN, str(e.exception))

    def test_plaintext_client_is_told_to_give_tls_ca(self):
        with self.assertRaises(ps_client.UnavailableError) as e:
            ps_client.connect(self.cluster.address, connect_timeout=3)
        self.assertIn("dials in plaintext", str(e.exception))
        self.assertIn("needs tls_ca", str(e.exception))

    def test_tls_client_not_trusting_the_cluster_gets_the_tls_hint(self):
        # The client certificate as the CA: the servers' certificate does not verify.
        with self.assertRaises(ps_client.UnavailableError) as e:
            ps_client.connect(self.cluster.address, tls_ca=self.file("client.pem"),
                              tls_cert=self.file("client.pem"), tls_key=self.file("client.key"),
                              connect_timeout=3)
        self.assertIn("dials with TLS", str(e.exception))


class ValidateTest(unittest.TestCase):
    """ClientOptions.validate on the security options; nothing is dialled."""

    def setUp(self):
        self.dir = cluster_case.temp_dir()

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def options(self, **kwargs):
        return ps_client.ClientOptions(coordinator="127.0.0.1:1", **kwargs)

    def test_token_file_without_tls_ca_is_refused(self):
        tokens = self.write("tokens", "worker %s\n" % UNKNOWN_TOKEN)
        with self.assertRaises(ps_client.FailedPreconditionError) as e:
            self.options(token_file=tokens).validate()
        self.assertIn("a bearer token must not cross the network in plaintext", str(e.exception))
        with self.assertRaises(ps_client.FailedPreconditionError):
            ps_client.connect("127.0.0.1:1", token_file=tokens)

    def test_cert_and_key_go_together(self):
        pem = self.write("x.pem", "-----BEGIN CERTIFICATE-----\n")
        with self.assertRaisesRegex(ps_client.InvalidArgumentError, "tls_cert is given without"):
            self.options(tls_ca=pem, tls_cert=pem).validate()
        with self.assertRaisesRegex(ps_client.InvalidArgumentError, "tls_key is given without"):
            self.options(tls_ca=pem, tls_key=pem).validate()

    def test_missing_and_non_pem_files_are_named(self):
        missing = os.path.join(self.dir, "nope.pem")
        with self.assertRaises(ps_client.NotFoundError) as e:
            self.options(tls_ca=missing).validate()
        self.assertIn("tls_ca", str(e.exception))
        self.assertIn(missing, str(e.exception))
        ca = self.write("ca.pem", "-----BEGIN CERTIFICATE-----\n")
        with self.assertRaises(ps_client.NotFoundError) as e:
            self.options(tls_ca=ca, token_file=missing).validate()
        self.assertIn("token_file", str(e.exception))
        not_pem = self.write("not.pem", "hello\n")
        with self.assertRaisesRegex(ps_client.InvalidArgumentError, "tls_ca .*not a PEM file"):
            self.options(tls_ca=not_pem).validate()

    def test_token_file_errors_name_the_line_not_the_token(self):
        ca = self.write("ca.pem", "-----BEGIN CERTIFICATE-----\n")
        secret = "s3cret-Token_value.xyz"
        cases = {
            "one_field": ("# c\n\n%s\n" % secret, ":3: expected"),
            "role": ("root %s\n" % secret, ':1: unknown role "root"'),
            "short": ("worker short\n", ":1: the token has 5 characters"),
            "long": ("worker %s\n" % ("a" * 513), ":1: the token has 513 characters"),
            "chars": ("worker %s!\n" % secret, ":1: the token has a character other"),
            "twice": ("admin %s\nworker %s\n" % (secret, secret), ":2: this token is listed"),
            "empty": ("# nothing\n", ": no token"),
        }
        for name, (text, message) in cases.items():
            with self.subTest(name):
                path = self.write(name, text)
                with self.assertRaises(ps_client.InvalidArgumentError) as e:
                    self.options(tls_ca=ca, token_file=path).validate()
                self.assertIn(path + message, str(e.exception))
                self.assertNotIn(secret, str(e.exception))

    def test_presented_token_prefers_worker(self):
        tokens = security.load_token_file(self.write(
            "tokens", "admin %s\nworker %s\n" % ("a" * 16, "w" * 16)))
        self.assertEqual(security.presented_token(tokens, "tokens"), "w" * 16)
        self.assertEqual(security.presented_token(tokens[:1], "tokens"), "a" * 16)

    def test_plaintext_is_the_default(self):
        self.assertFalse(self.options().validate().tls)
        ca = self.write("ca.pem", "-----BEGIN CERTIFICATE-----\n")
        self.assertTrue(self.options(tls_ca=ca).validate().tls)


if __name__ == "__main__":
    unittest.main()
