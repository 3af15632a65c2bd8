"""The repository's Python has one import name per file and no import cycle in the plugin.

- Shipped and build-time code (the plugin, the image and wheel tools, the AOT step, the model
  generators, the shared kernel references) never rewrites sys.path or a package's __path__:
  every module is reached through its package from one root (the workspace root in Bazel's
  runfiles and actions, the wheel in the image).
- vllm_backport's modules import each other without a cycle at module level.
"""

import ast
import os
import pathlib
import unittest

RUNFILES = pathlib.Path(os.getcwd())
# The packages whose sources this test's data brings (tests/build/BUILD).
SHIPPED = ["engine/vllm_backport", "engine/build_tools", "images/oci", "tools/ci", "tools/pins", "kernels/aot",
           "kernels/testing", "models", "tools/bench"]


def python_files():
    for folder in SHIPPED:
        for path in sorted((RUNFILES / folder).rglob("*.py")):
            if path.name != "__init__.py" or path.stat().st_size:  # Bazel's empty runfiles __init__s
                yield path


def path_rewrites(source):
    """Statements that change sys.path or assign a module's __path__."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            target = node.func.value
            if isinstance(target, ast.Attribute) and target.attr == "path" and \
                    isinstance(target.value, ast.Name) and target.value.id == "sys":
                found.append(f"line {node.lineno}: sys.path.{node.func.attr}(...)")
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                text = ast.unparse(t)
                if text in ("__path__", "sys.path") or text.startswith("sys.path["):
                    found.append(f"line {node.lineno}: {text} = ...")
    return found


def plugin_imports(path, package_root):
    """vllm_backport modules imported at module level (not inside functions) by one file."""
    module = ".".join(path.relative_to(package_root).with_suffix("").parts)
    module = module[:-len(".__init__")] if module.endswith(".__init__") else module
    is_package = path.name == "__init__.py"
    out = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("vllm_backport")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[:len(module.split(".")) - node.level + (1 if is_package else 0)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            if name.startswith("vllm_backport"):
                out.add((name, tuple(a.name for a in node.names)))
    return module, out


def resolve(imports, modules):
    """Module names an import set reaches: `from pkg import mod` reaches pkg.mod when that is a
    module, else pkg itself."""
    out = set()
    for item in imports:
        if isinstance(item, str):
            out.add(item)
            continue
        base, names = item
        subs = {f"{base}.{n}" for n in names if f"{base}.{n}" in modules}
        out |= subs or {base}
        if len(subs) < len(names):
            out.add(base)
    return out


class LayoutTest(unittest.TestCase):
    def test_no_sys_path_or_package_path_rewriting(self):
        files = list(python_files())
        self.assertGreater(len(files), 60, "the test's data lost the shipped sources")
        for path in files:
            with self.subTest(file=str(path.relative_to(RUNFILES))):
                self.assertEqual(path_rewrites(path.read_text()), [])

    def test_the_finder_catches_a_rewrite(self):
        self.assertEqual(len(path_rewrites("import sys\nsys.path.insert(0, 'x')\n__path__ = ['y']\n")), 2)

    def test_plugin_has_no_module_level_import_cycle(self):
        root = RUNFILES / "engine"
        files = [p for p in (root / "vllm_backport").rglob("*.py") if p.stat().st_size]
        raw = dict(plugin_imports(p, root) for p in files)
        graph = {m: {d for d in resolve(deps, raw) if d in raw and d != m} for m, deps in raw.items()}
        self.assertIn("vllm_backport.plugin", graph)
        state = {}

        def visit(node, stack):
            state[node] = "open"
            for dep in sorted(graph[node]):
                if state.get(dep) == "open":
                    self.fail("import cycle: " + " -> ".join(stack[stack.index(dep):] + [dep]))
                if dep not in state:
                    visit(dep, stack + [dep])
            state[node] = "done"

        for node in sorted(graph):
            if node not in state:
                visit(node, [node])


if __name__ == "__main__":
    unittest.main()
