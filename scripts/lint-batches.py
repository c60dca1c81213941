#!/usr/bin/env python3
"""Groups clang-tidy's translation units into unity batches (scripts/lint.sh).

clang-tidy matches its checks over the whole translation unit, the standard library and xtensor
included, so most of a unit's time goes to headers that every unit shares. A batch is one file
that #includes several of our .cpp files compiled with the same command line for the same target;
clang-tidy then walks the shared headers once per batch instead of once per file, and reports
findings in the included files as in headers (the header filter covers every source directory).
Measured with clang-tidy 14 on ten library files: 5.9 s of CPU as one batch, 32.8 s one by one.

Usage: lint-batches.py BUILD_DIR BATCH_SIZE UNIT...
Writes BUILD_DIR/lint-unity/compile_commands.json and the batch files beside it, and prints the
files to check, one per line: each batch, then each unit that shares its command line with no
other. A batch whose files clash (two files define the same file-local name) does not compile;
lint.sh then checks that batch's files one by one (the "// unit:" lines name them).
"""
import json
import os
import shlex
import sys


def command_of(entry):
    if "arguments" in entry:
        return list(entry["arguments"])
    return shlex.split(entry["command"])


def main():
    build, batch_size, units = sys.argv[1], int(sys.argv[2]), set(sys.argv[3:])
    with open(os.path.join(build, "compile_commands.json"), encoding="utf-8") as f:
        database = json.load(f)
    out_dir = os.path.join(os.path.abspath(build), "lint-unity")
    os.makedirs(out_dir, exist_ok=True)

    # Key: the command line without its input and output, plus the target (the object's
    # CMakeFiles/<target>.dir): files of two executables may each define main().
    groups = {}
    seen = set()
    for entry in database:
        path = entry["file"]
        if path not in units or path in seen:
            continue
        seen.add(path)
        args = command_of(entry)
        key_args, target, skip = [], "", False
        for i, arg in enumerate(args):
            if skip:
                skip = False
                continue
            if arg == "-o" and i + 1 < len(args):
                target = os.path.dirname(args[i + 1])
                skip = True
                continue
            if arg == "-c" or arg == path:
                continue
            key_args.append(arg)
        groups.setdefault((tuple(key_args), target), (entry["directory"], []))[1].append(path)

    batches, singles = [], []
    for (args, _), (directory, paths) in sorted(groups.items(), key=lambda item: sorted(item[1][1])[0]):
        paths.sort()
        if len(paths) == 1:
            singles.extend(paths)
            continue
        count = -(-len(paths) // batch_size)  # as many batches as needed, of even sizes
        for i in range(count):
            members = paths[i::count]
            name = os.path.join(out_dir, f"batch{len(batches)}.cpp")
            with open(name, "w", encoding="utf-8") as f:
                for member in members:
                    f.write(f"// unit: {member}\n")
                for member in members:
                    f.write(f'#include "{member}"\n')
            batches.append({"directory": directory, "file": name, "arguments": [*args, "-c", name]})
    with open(os.path.join(out_dir, "compile_commands.json"), "w", encoding="utf-8") as f:
        json.dump(batches, f, indent=1)
    for batch in batches:
        print(batch["file"])
    for path in singles:
        print(path)


if __name__ == "__main__":
    main()
