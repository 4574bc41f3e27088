"""The package keeps to the oldest Python it declares (pyproject's
requires-python): every module parses as that version's grammar.  (The C
extension keeps to that version's C API: module.c and the glue files use
no call newer than 3.9, such as Py_NewRef; CI builds on its own Python.)
"""
import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def declared_floor():
    text = (ROOT / "pyproject.toml").read_text()
    major, minor = re.search(r'requires-python\s*=\s*">=(\d+)\.(\d+)"',
                             text).groups()
    return int(major), int(minor)


def test_floor_is_declared():
    assert declared_floor() == (3, 9)


@pytest.mark.parametrize("path", sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "src" / "convstencil").rglob("*.py")))
def test_module_parses_as_the_oldest_python(path):
    source = (ROOT / path).read_text()
    ast.parse(source, filename=path, feature_version=declared_floor())


NEWER_C_API = ("Py_NewRef", "Py_XNewRef", "PyModule_AddObjectRef",
               "Py_IsNone", "Py_IsTrue", "Py_IsFalse",
               "PyErr_GetRaisedException", "PyModule_Add(")


@pytest.mark.parametrize("path", sorted(
    str(p.relative_to(ROOT)) for p in (ROOT / "csrc").glob("*.c")))
def test_c_glue_uses_no_newer_c_api(path):
    source = (ROOT / path).read_text()
    used = [name for name in NEWER_C_API if name in source]
    assert not used, "%s uses %s (newer than Python 3.9)" % (path, used)
