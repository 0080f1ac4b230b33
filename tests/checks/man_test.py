#!/usr/bin/python3
"""The man pages render and document every option the binary's help lists.

  man_test.py DSFS_BINARY MAN_DIR USAGE_MD

MAN_DIR holds dsfs.1 and mount.fuse.dsfs.8 as the build made them (pandoc, from
docs/man/*.md), USAGE_MD is docs/usage.md. Each page is rendered with `man -l` (groff when
man-db is missing); then:
  - every option of `dsfs --help` is in dsfs(1);
  - every command of `dsfs --help` has its section in dsfs(1) ("dsfs COMMAND ..."), and every
    option of `dsfs COMMAND --help` (and of `dsfs COMMAND SUB --help` for a command with
    subcommands, dsfs cache ls|gc) is in that section;
  - every -o option of `dsfs mount --help` is a definition in mount.fuse.dsfs(8), and named in
    dsfs(1)'s mount section;
  - every flag of `mount.fuse.dsfs --help` is in mount.fuse.dsfs(8);
  - docs/usage.md's command reference (its "## Commands" block) has a "dsfs COMMAND" entry for
    every command, naming every option of `dsfs COMMAND --help` there, and every -o option of
    `dsfs mount --help` in the mount entry;
  - and the other way: every option that dsfs(1)'s command sections and usage.md's entries
    name exists in that command's --help (or the global one), and every mount option that
    mount.fuse.dsfs(8) or usage.md defines exists in `dsfs mount --help`;
  - where a command's --help says what -q or -f does in the words of CLAIMS ("print nothing on
    success", "empty directory"), that option's entry in its dsfs(1) section and in usage.md
    says it too (pack --help and the pages said -q only hid the progress bar).
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


def command_options(dsfs, cmd, help_text):
    """The options of `dsfs CMD --help` and, for a command with subcommands of its own (dsfs
    cache ls|gc), those of each `dsfs CMD SUB --help`."""
    opts = list(cli_options(help_text))
    for sub in commands(help_text):
        _, text, _ = run([dsfs, cmd, sub, "--help"])
        opts += [o for o in cli_options(text) if o not in opts]
    return opts


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


OPTION = re.compile(r"(?<![\w$./=-])(--?[A-Za-z][\w-]*)")


def named_options(text):
    """The options a text names (-f, --force), not words with dashes (bmp-N, 1K-4M), nor the
    -o of mount options it refers to ("the EROFS mount of -o kernel")."""
    return set(OPTION.findall(text)) - {"-o"}


def defined_mount_options(helper8):
    """The terms of mount.fuse.dsfs(8)'s MOUNT OPTIONS list: lines at the list's indent (7)
    whose first word is an option (name, name=VALUE, name[=VALUE], "uid=N, gid=N"), alone or
    followed by its description after two spaces, the description going on at 14."""
    m = re.search(r"^MOUNT OPTIONS\n(.*?)(?=^[A-Z])", helper8, re.M | re.S)
    lines = (m.group(1) if m else "").splitlines() + [""]
    names = set()
    for i, line in enumerate(lines[:-1]):
        t = re.match(r"^ {7}(\S+(?:, \S+)*)(?: +\S.*)?$", line)
        opt = r"[a-z][a-z0-9_]*(?:=\S*|\[=\S*\])?"
        if not t or not re.fullmatch(opt + r"(?:, " + opt + r")*", t.group(1)):
            continue
        term, follows = t.group(1), lines[i + 1]
        if "=" in term or re.match(r"^ {14}\S", follows) or not follows.strip():
            names |= {re.split(r"[=\[]", x.strip())[0] for x in term.split(",") if x.strip()}
    return names


def usage_entries(usage_md):
    """docs/usage.md's "## Commands" code block, split into its entries: {command: text}, with
    the global lines ("dsfs --log-level ...", "dsfs -V ...") together under ''."""
    m = re.search(r"^## Commands\n+```\n(.*?)^```", usage_md, re.M | re.S)
    entries, current = {}, None
    for line in (m.group(1) if m else "").splitlines():
        h = re.match(r"^dsfs (-)?(\S+)", line)
        if h:
            current = "" if h.group(1) else h.group(2)
        if current is not None:
            entries[current] = entries.get(current, "") + line + "\n"
    return entries


# (option as --help lists it, as the pages write it, what it says): said by --help, said by the pages.
CLAIMS = [("-q,--quiet", "-q, --quiet", "nothing on success"),
          ("-f,--force", "-f, --force", "empty directory")]


def flat(text):
    return re.sub(r"\s+", " ", text).lower()


def help_says(help_text, flag, words):
    m = re.search(r"^\s+" + re.escape(flag) + r"\b.*$", help_text, re.M)
    return m is not None and words in flat(m.group(0))


def entry_of(text, flag):
    """The paragraph of `flag` in a man page section or a usage.md entry: its line and the
    more indented lines after it."""
    m = re.search(r"^( +)" + re.escape(flag) + r"\b.*\n((?:\1 +\S.*\n)*)", text, re.M)
    return flat(m.group(0)) if m else None


def check_claims(where, cmd, help_text, text, problems):
    for flag, written, words in CLAIMS:
        if not help_says(help_text, flag, words):
            continue
        entry = entry_of(text, written)
        if entry is not None and words not in entry:
            problems.append(f"{where}: dsfs {cmd} {written} does not say '{words}', as "
                            f"dsfs {cmd} --help does")


def check_usage(dsfs, usage_md, top, problems):
    entries = usage_entries(usage_md)
    if not entries:
        problems.append("docs/usage.md: no '## Commands' block")
        return
    global_opts = set(cli_options(top))
    for o in named_options(entries.get("", "")):
        if o not in global_opts:
            problems.append(f"docs/usage.md: global option {o} is not in dsfs --help")
    for cmd in commands(top):
        text = entries.get(cmd)
        if text is None:
            problems.append(f"docs/usage.md: no entry for command {cmd}")
            continue
        _, sub, _ = run([dsfs, cmd, "--help"])
        check_claims("docs/usage.md", cmd, sub, text, problems)
        opts = set(command_options(dsfs, cmd, sub))
        for opt in opts - {"-h", "--help"}:
            if not has_word(text, opt):
                problems.append(f"docs/usage.md: option {opt} of dsfs {cmd} --help is not in "
                                "its entry")
        for o in named_options(text):
            if o not in opts | global_opts:
                problems.append(f"docs/usage.md: dsfs {cmd} {o} is documented, but dsfs {cmd} "
                                "--help has no such option")
        if cmd == "mount":
            names = set(mount_options(sub))
            documented = {re.split(r"[=\[]", x)[0]
                          for o in re.findall(r"^  -o (\S+)", text, re.M) for x in o.split(",")}
            for name in sorted(names - documented):
                problems.append(f"docs/usage.md: mount option {name} is not in the mount entry")
            for name in sorted(documented - names):
                problems.append(f"docs/usage.md: -o {name} is documented, but dsfs mount --help "
                                "has no such option")
    for cmd in entries:
        if cmd and cmd not in commands(top):
            problems.append(f"docs/usage.md: dsfs {cmd} is documented, but is no command")


def main():
    if len(sys.argv) != 4:
        print("usage: man_test.py DSFS_BINARY MAN_DIR USAGE_MD", file=sys.stderr)
        return 2
    dsfs, man_dir = sys.argv[1], sys.argv[2]
    with open(sys.argv[3]) as f:
        usage_md = f.read()
    pages = {n: os.path.join(man_dir, n) for n in ("dsfs.1", "mount.fuse.dsfs.8")}
    missing = [p for p in pages.values() if not os.path.exists(p)]
    if missing:
        print(f"skipped: {', '.join(missing)} not built (pandoc missing: bash scripts/setup.sh)")
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
        cmd_opts = command_options(dsfs, cmd, sub)
        check_claims("dsfs(1)", cmd, sub, bodies[cmd], problems)
        for opt in cmd_opts:
            if opt in ("-h", "--help"):
                continue  # GLOBAL OPTIONS says every command takes them
            if not has_word(bodies[cmd], opt):
                problems.append(f"dsfs(1): option {opt} of dsfs {cmd} --help is not documented "
                                "in its section")
        for o in named_options(bodies[cmd]):
            if o not in set(cmd_opts) | set(cli_options(top)):
                problems.append(f"dsfs(1): dsfs {cmd} {o} is documented, but dsfs {cmd} --help "
                                "has no such option")
        if cmd == "mount":
            names = mount_options(sub)
            if not names:
                problems.append("dsfs mount --help lists no mount options")
            for name in sorted(defined_mount_options(helper8) - set(names)):
                problems.append(f"mount.fuse.dsfs(8): mount option {name} is documented, but "
                                "dsfs mount --help has no such option")
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
    check_usage(dsfs, usage_md, top, problems)
    for p in problems:
        print(p)
    if not problems:
        print("man_test: ok (dsfs.1, mount.fuse.dsfs.8, docs/usage.md)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
