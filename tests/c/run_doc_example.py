"""Runs the ```python block of docs/c-api.md as it stands (the library found through
LD_LIBRARY_PATH, as the page's CDLL("libmlframework_c.so") expects).

    python3 run_doc_example.py <docs/c-api.md>
"""
import sys

text = open(sys.argv[1], encoding="utf-8").read()
start = text.index("```python\n") + len("```python\n")
code = text[start:text.index("```", start)]
exec(compile(code, "docs/c-api.md", "exec"), {"__name__": "__doc_example__"})
