#!/usr/bin/env python3
"""Writes the C code block between <!-- example:begin --> and <!-- example:end --> in README.md
to a file, so the usage example the README shows is the one a test compiles and runs."""
import sys

text = open(sys.argv[1]).read()
begin, end = "<!-- example:begin -->", "<!-- example:end -->"
if begin not in text or end not in text:
    sys.exit("README.md has no example block")
block = text.split(begin, 1)[1].split(end, 1)[0]
code = block.split("```c", 1)[1].rsplit("```", 1)[0]
open(sys.argv[2], "w").write(code.lstrip("\n"))
