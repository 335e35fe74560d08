#!/usr/bin/python3
"""Checks that every relative link in every README.md of the repository leads somewhere.

For each markdown link or image, `[text](target)` or `![alt](target)`, outside fenced code blocks
and inline code: a target with a scheme (http:, https:, mailto:, ...) is skipped; any other names a
file or folder relative to the README (or to the repository root when it starts with "/"), which
must exist, inside the repository; a `#anchor` on a markdown file (or alone, for the README
itself) must be the GitHub-style slug of one of that file's headings.

Run by Bazel as //tests:readme_links_test, whose runfiles hold every README.md (the `readmes`
filegroup of tests/BUILD). Other targets, source files and folders that are no test's data, are
looked up in the source tree that the runfiles' README.md links point into, which is also walked
for README.md files missing from the filegroup. Outside Bazel, from the repository root:

    /usr/bin/python3 tests/readme_links_test.py [ROOT]

Exits 0 when every link resolves, 1 otherwise, naming each broken link by file and line.
Python 3 standard library only.
"""

import os
import re
import sys
import tempfile
import urllib.parse

FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# Inline code, possibly over several lines of one paragraph.
CODE_SPAN = re.compile(r"`(?:[^`\n]|\n(?![ \t]*\n))+`")
# [text](target) or ![alt](target), the text possibly over several lines, the target with an
# optional "title".
LINK = re.compile(
    r"!?\[((?:[^\[\]\n]|\n(?![ \t]*\n)|`[^`]*`)*)\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)"
)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def github_slug(heading):
    """The anchor GitHub gives a heading: its text, lowercased, punctuation dropped, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML tags
    text = text.replace("`", "").replace("*", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def strip_code(text):
    """The text with fenced blocks blanked (lines kept, so offsets give line numbers)."""
    out = []
    fence = None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            out.append("")
        elif fence is not None:
            if line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                fence = None
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def mask_inline_code(text):
    """Blanks inline code spans, except those that are a link's whole text: [`x`](y)."""

    def repl(m):
        before = text[m.start() - 1] if m.start() > 0 else ""
        after = text[m.end():m.end() + 2]
        if before == "[" and after == "](":
            return m.group(0)
        return re.sub(r"[^\n]", " ", m.group(0))

    return CODE_SPAN.sub(repl, text)


def anchors_of(text):
    """The GitHub anchors of a markdown text's headings (duplicates numbered -1, -2, ...)."""
    seen = {}
    anchors = set()
    for line in strip_code(text).split("\n"):
        m = HEADING.match(line)
        if not m:
            continue
        slug = github_slug(m.group(2))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else "%s-%d" % (slug, n))
    return anchors


def links_of(text):
    """(line number, target) of every link outside code."""
    body = mask_inline_code(strip_code(text))
    for m in LINK.finditer(body):
        yield body.count("\n", 0, m.start(2)) + 1, m.group(2)


class Checker:
    """Resolves links of README files under `root`; `source_root`, if given, is the fallback tree."""

    def __init__(self, root, source_root=None):
        self.root = os.path.abspath(root)
        self.source_root = source_root
        self._anchors = {}

    def _anchors_for(self, path):
        if path not in self._anchors:
            with open(path, encoding="utf-8") as f:
                self._anchors[path] = anchors_of(f.read())
        return self._anchors[path]

    def _locate(self, rel):
        """The existing path of a repository-relative path, in `root` or else `source_root`."""
        for base in (self.root, self.source_root):
            if base is None:
                continue
            path = os.path.join(base, rel)
            if os.path.exists(path):
                return path
        return None

    def check_file(self, readme_rel):
        """The problems of one README (a path relative to the root), as strings."""
        problems = []
        readme = os.path.join(self.root, readme_rel)
        with open(readme, encoding="utf-8") as f:
            text = f.read()
        base_dir = os.path.dirname(readme_rel)
        for line, target in links_of(text):
            where = "%s:%d: (%s)" % (readme_rel, line, target)
            if SCHEME.match(target):
                continue
            path_part, _, anchor = target.partition("#")
            path_part = urllib.parse.unquote(path_part)
            if path_part == "":
                rel = readme_rel
            elif path_part.startswith("/"):
                rel = os.path.normpath(path_part.lstrip("/"))
            else:
                rel = os.path.normpath(os.path.join(base_dir, path_part))
            if rel == ".." or rel.startswith("../") or os.path.isabs(rel):
                problems.append("%s leads outside the repository" % where)
                continue
            located = self._locate(rel)
            if located is None:
                problems.append("%s: no such file or folder: %s" % (where, rel))
                continue
            if anchor:
                if os.path.isdir(located) or not located.endswith(".md"):
                    problems.append("%s: an anchor on %s, which is not a markdown file" % (where, rel))
                elif anchor not in self._anchors_for(located):
                    problems.append("%s: %s has no heading whose anchor is #%s" % (where, rel, anchor))
        return problems


def find_readmes(root):
    """README.md files under root, relative to it, sorted (bazel-* and hidden folders skipped)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith((".", "bazel-")))
        if "README.md" in filenames:
            found.append(os.path.relpath(os.path.join(dirpath, "README.md"), root))
    return sorted(found)


def self_test():
    """The checker finds a broken file link, a broken anchor, and passes the good ones."""
    with tempfile.TemporaryDirectory() as tmp:
        os.makedirs(os.path.join(tmp, "a"))
        with open(os.path.join(tmp, "README.md"), "w", encoding="utf-8") as f:
            f.write(
                "# Top\n\n## The `ps_ctl` tool (CLI)\n\n[a](a/README.md#part-two) [b](a/) "
                "[self](#the-ps_ctl-tool-cli) [web](https://example.com/x)\n"
                "```\n[in code](missing.md)\n```\n`[inline](missing.md)`\n"
                "[over two\nlines](a/README.md)\n"
            )
        with open(os.path.join(tmp, "a", "README.md"), "w", encoding="utf-8") as f:
            f.write("# A\n\n## Part two\n\n[up](../README.md#top) [gone](../nothing.md) "
                    "[bad anchor](../README.md#nowhere) [out](../../x.md)\n")
        checker = Checker(tmp)
        top = checker.check_file("README.md")
        sub = checker.check_file(os.path.join("a", "README.md"))
        assert top == [], top
        assert len(sub) == 3, sub
        assert "no such file" in sub[0] and "nothing.md" in sub[0], sub
        assert "#nowhere" in sub[1], sub
        assert "outside the repository" in sub[2], sub
        assert find_readmes(tmp) == ["README.md", os.path.join("a", "README.md")]


def main(argv):
    self_test()
    source_root = None
    if os.environ.get("TEST_SRCDIR"):
        # Under Bazel: the runfiles of the workspace; the README.md files are its data.
        root = os.getcwd()
        top = os.path.join(root, "README.md")
        if not os.path.exists(top):
            print("readme_links_test: README.md is not in the runfiles (the `readmes` filegroup)")
            return 1
        source_root = os.path.dirname(os.path.realpath(top))
    else:
        root = argv[1] if len(argv) > 1 else "."
    readmes = find_readmes(root)
    problems = []
    if source_root and source_root != os.path.abspath(root):
        for rel in find_readmes(source_root):
            if rel not in readmes:
                problems.append("%s: not checked: add it to the `readmes` filegroup of tests/BUILD "
                                "(and exports_files([\"README.md\"]) to its package)" % rel)
    checker = Checker(root, source_root)
    links = 0
    for rel in readmes:
        with open(os.path.join(root, rel), encoding="utf-8") as f:
            links += sum(1 for _ in links_of(f.read()))
        problems.extend(checker.check_file(rel))
    for p in problems:
        print(p)
    print("readme_links_test: %d README.md files, %d links, %d problems" % (len(readmes), links, len(problems)))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
