#!/usr/bin/env python3
"""Names the frames of a thread-stack dump (framework/core/thread_stacks.h).

Frames arrive as "LIBRARY(+0xOFFSET)[0xADDRESS]" or "LIBRARY(SYMBOL+0xOFFSET)[...]". The first
kind is resolved with `addr2line -f -C -e LIBRARY 0xOFFSET` (functions of stripped libraries
stay "??": the library name and offset are kept), the second is demangled with c++filt.
Usage: scripts/symbolize_stacks.py [FILE]   (standard input without FILE; writes to stdout)
"""
import re
import shutil
import subprocess
import sys

FRAME = re.compile(r"^(?P<lib>[^()\s]+)\((?P<sym>[^)+]*)\+(?P<off>0x[0-9a-f]+)\)\[(?P<addr>0x[0-9a-f]+)\]$")


def resolve(lib, offsets):
    """{offset: "function at file:line"} for one library, one addr2line call."""
    if not shutil.which("addr2line"):
        return {}
    try:
        out = subprocess.run(["addr2line", "-f", "-C", "-e", lib, *offsets], capture_output=True, text=True,
                             timeout=120).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {}
    names = {}
    for i, off in enumerate(offsets):
        if 2 * i + 1 < len(out):
            function, where = out[2 * i], out[2 * i + 1]
            if function != "??":
                names[off] = function + ("" if where.startswith("??") else f" at {where}")
    return names


def demangle(symbols):
    if not symbols or not shutil.which("c++filt"):
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(symbols), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(symbols, out))


def main():
    source = open(sys.argv[1], errors="replace") if len(sys.argv) > 1 else sys.stdin
    lines = source.read().splitlines()
    wanted = {}
    mangled = set()
    for line in lines:
        m = FRAME.match(line.strip())
        if not m:
            continue
        if m["sym"]:
            mangled.add(m["sym"])
        else:
            wanted.setdefault(m["lib"], set()).add(m["off"])
    names = {lib: resolve(lib, sorted(offs)) for lib, offs in wanted.items()}
    plain = demangle(sorted(mangled))
    for line in lines:
        m = FRAME.match(line.strip())
        if not m:
            print(line)
        elif m["sym"]:
            print(f"  {plain.get(m['sym'], m['sym'])}+{m['off']}  [{m['lib']}]")
        else:
            name = names.get(m["lib"], {}).get(m["off"])
            print(f"  {name}  [{m['lib']}+{m['off']}]" if name else f"  ??  [{m['lib']}+{m['off']}]")


if __name__ == "__main__":
    main()
