"""The hand-written stubs (python/sluice/__init__.pyi) name what the module has."""

import ast
import os

import sluice


def stub_tree():
    path = os.path.join(os.path.dirname(sluice.__file__), "__init__.pyi")
    with open(path) as f:
        return ast.parse(f.read())


def test_every_stubbed_name_and_method_exists():
    for node in stub_tree().body:
        if isinstance(node, ast.ClassDef):
            cls = getattr(sluice, node.name)
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    assert hasattr(cls, item.name), f"{node.name}.{item.name}"


def test_every_public_name_is_stubbed():
    stubbed = {n.name for n in stub_tree().body if isinstance(n, ast.ClassDef)}
    assert set(sluice.__all__) <= stubbed
