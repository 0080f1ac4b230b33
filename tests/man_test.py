#!/usr/bin/python3
"""The man pages render and document every option the binary's help lists.

  man_test.py DSFS_BINARY MAN_DIR

MAN_DIR holds dsfs.1 and mount.fuse.dsfs.8 as the build made them (pandoc, from
docs/man/*.md). Each is rendered with `man -l` (groff when man-db is missing); then:
  - every option of `dsfs --help` is in dsfs(1);
  - every command of `dsfs --help` has its section in dsfs(1) ("dsfs COMMAND ..."), and every
    option of `dsfs COMMAND --help` is in that section;
  - every -o option of `dsfs mount --help` is a definition in mount.fuse.dsfs(8), and named in
    dsfs(1)'s mount section;
  - every flag of `mount.fuse.dsfs --help` is in mount.fuse.dsfs(8).
One line per problem; exit status 1 if any, 77 (skipped) when the pages were not built.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile


def run(argv):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=dict(os.environ, LC_ALL="C", MANWIDTH="100", COLUMNS="100"))
    return p.returncode, p.stdout, p.stderr


def render(page):
    if shutil.which("man"):
        rc, out, err = run(["man", "-l", "-P", "cat", page])
    else:
        rc, out, err = run(["groff", "-man", "-Tascii", "-P", "-cbou", page])
    if rc != 0 or not out.strip():
        raise SystemExit(f"{os.path.basename(page)}: does not render (status {rc}): {err.strip()}")
    # Undo what a terminal renderer may add: overstrikes and hyphenation at line ends.
    out = re.sub(r".\x08", "", out)
    return re.sub(r"(\w)-\n\s+(\w)", r"\1\2", out)


def section(text, header):
    """The lines under `header:` in CLI11's help, up to the next blank line."""
    m = re.search(r"^" + re.escape(header) + r":\n((?:[ \t]+.*\n?)*)", text, re.M)
    return m.group(1) if m else ""


def cli_options(help_text):
    """-f,--force  TEXT=...  ->  ['-f', '--force']"""
    opts = []
    for line in section(help_text, "Options").splitlines():
        m = re.match(r"^\s+(-\S+)", line)
        if m:
            opts += [o for o in m.group(1).split(",") if o.startswith("-")]
    return opts


def commands(help_text):
    return [m.group(1) for m in re.finditer(r"^\s+([a-z]+)\s", section(help_text, "Subcommands"),
                                            re.M)]


def mount_options(help_text):
    m = re.search(r"^Mount options.*\n((?:  .*\n)*)", help_text, re.M)
    names = []
    for line in (m.group(1) if m else "").splitlines():
        t = re.match(r"^  ([a-z_]+\S*)", line)
        if t:
            names += [re.split(r"[=\[]", x)[0] for x in t.group(1).split(",")]
    return names


def has_word(text, word):
    return re.search(r"(?<![\w-])" + re.escape(word) + r"(?![\w-])", text) is not None


def has_definition(text, name):
    return re.search(r"^\s+(?:\S+, )*" + re.escape(name) + r"(?:[=\[,\s]|$)", text, re.M)


def main():
    if len(sys.argv) != 3:
        print("usage: man_test.py DSFS_BINARY MAN_DIR", file=sys.stderr)
        return 2
    dsfs, man_dir = sys.argv[1], sys.argv[2]
    pages = {n: os.path.join(man_dir, n) for n in ("dsfs.1", "mount.fuse.dsfs.8")}
    missing = [p for p in pages.values() if not os.path.exists(p)]
    if missing:
        print(f"skipped: {', '.join(missing)} not built (pandoc missing: bash tools/setup.sh)")
        return 77
    dsfs1, helper8 = render(pages["dsfs.1"]), render(pages["mount.fuse.dsfs.8"])
    problems = []

    rc, top, _ = run([dsfs, "--help"])
    if rc != 0 or not commands(top):
        problems.append(f"dsfs --help: status {rc}, no commands listed")
    for opt in cli_options(top):
        if not has_word(dsfs1, opt):
            problems.append(f"dsfs(1): option {opt} of dsfs --help is not documented")
    heads = list(re.finditer(r"^   dsfs ([a-z]+)\b.*$", dsfs1, re.M))
    bodies = {}
    for i, h in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(dsfs1)
        top_level = re.search(r"^[A-Z]", dsfs1[h.end():end], re.M)  # FILES, EXAMPLES, ...
        if top_level:
            end = h.end() + top_level.start()
        bodies[h.group(1)] = dsfs1[h.start():end]
    for cmd in commands(top):
        rc, sub, _ = run([dsfs, cmd, "--help"])
        if rc != 0:
            problems.append(f"dsfs {cmd} --help: status {rc}")
        if cmd not in bodies:
            problems.append(f"dsfs(1): no section for command {cmd}")
            continue
        for opt in cli_options(sub):
            if opt in ("-h", "--help"):
                continue  # GLOBAL OPTIONS says every command takes them
            if not has_word(bodies[cmd], opt):
                problems.append(f"dsfs(1): option {opt} of dsfs {cmd} --help is not documented "
                                "in its section")
        if cmd == "mount":
            names = mount_options(sub)
            if not names:
                problems.append("dsfs mount --help lists no mount options")
            for name in names:
                if not has_definition(helper8, name):
                    problems.append(f"mount.fuse.dsfs(8): mount option {name} of dsfs mount "
                                    "--help is not documented")
                if not has_word(bodies[cmd], name):
                    problems.append(f"dsfs(1): mount option {name} is not named in the mount "
                                    "section")

    with tempfile.TemporaryDirectory() as tmp:
        helper = os.path.join(tmp, "mount.fuse.dsfs")
        os.symlink(os.path.abspath(dsfs), helper)
        rc, usage, _ = run([helper, "--help"])
    flags = re.findall(r"\[(-\w)\b", usage.splitlines()[0] if usage else "")
    if rc != 0 or not flags:
        problems.append(f"mount.fuse.dsfs --help: status {rc}, no flags listed")
    for flag in flags:
        if not has_definition(helper8, flag):
            problems.append(f"mount.fuse.dsfs(8): flag {flag} of mount.fuse.dsfs --help is not "
                            "documented")
    for p in problems:
        print(p)
    if not problems:
        print("man_test: ok (dsfs.1, mount.fuse.dsfs.8)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
