#!/usr/bin/env python3
"""Writes a fenced code block of README.md to a file, so that what the README shows is what a
test builds and runs. Without NAME: the C example between <!-- example:begin --> and
<!-- example:end -->. With NAME: the block right after <!-- recipe:NAME --> (the install
recipe, the Makefile, the CMakeLists.txt). Usage: extract_example.py README OUT [NAME]"""
import sys

text = open(sys.argv[1]).read()
if len(sys.argv) > 3:
    marker = f"<!-- recipe:{sys.argv[3]} -->"
    if marker not in text:
        sys.exit(f"README.md has no {marker}")
    after = text.split(marker, 1)[1].lstrip("\n")
    if not after.startswith("```"):
        sys.exit(f"README.md: no code block right after {marker}")
    code = after.split("\n", 1)[1].split("\n```", 1)[0] + "\n"
else:
    begin, end = "<!-- example:begin -->", "<!-- example:end -->"
    if begin not in text or end not in text:
        sys.exit("README.md has no example block")
    block = text.split(begin, 1)[1].split(end, 1)[0]
    code = block.split("```c", 1)[1].rsplit("```", 1)[0].lstrip("\n")
open(sys.argv[2], "w").write(code)
