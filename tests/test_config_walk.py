"""The walk of `config` from `train_es` stays in at most 8 files (issue #34).

Definition. The *run config* is the object `prover_cli.config.load_config` returns. The walk starts
at `prover_cli.es.train.train_es`, whose parameter `config` holds it, and follows every call that
passes the whole run config as an argument; the walk is the set of functions and classes so
reached, and its files are the distinct modules holding them. Read statically with `ast`:

- *Holding the config.* In a function: the parameter a call bound it to (by position or keyword,
  whatever the parameter's name; `*args`/`**kwargs` included), and every local name assigned from
  something holding it (`c = config`, `c: Any = config`, `(c := config)`, `a, c = x, config`,
  `c = config or other`, `c = dataclasses.replace(config, ...)`), closures and lambdas included.
  In a class: `self.<attr>` in every method, once any method stored the config there
  (`self.config = config`; a dataclass field set by the constructor). A section (`config.es`) or a
  value (`config.run.seed`) is not the whole config and is not followed.
- *Passing it.* A call passes the config when an argument (positional, keyword, `*x`, `**x`, or
  either branch of `a if t else b`) holds it.
- *Resolving the callee*, inside the package: a function or class of the same module or nested in
  the function; a name bound by `from m import f` or `import m as x` (relative and function-local,
  lazy imports included), followed through package re-exports (`from .sub import f` in an
  `__init__.py`) and module-level aliases (`g = f`); `self.m(...)`, `cls(...)`, `super().m(...)`,
  `Class.m(...)`; and `REGISTRY[key](...)` on a module-level dict, list or tuple literal (every
  entry; one that is empty or filled at run time, `_REGISTRY[name] = factory`, is unresolved). A call that leaves the package (stdlib, builtins, torch) is not part of the walk, unless
  it also takes one of the package's functions (`functools.partial(f, config)`,
  `Thread(target=f, args=(config,))`): that one is listed as unresolved (below). The config's own
  methods and properties (`config.to_dict()`, `config.run_dir`, `config.check_problems_per_iteration`)
  are the object itself, in config.py, and are not followed.
- *Classes.* A class constructed with the config, or whose method is called with it, reaches all
  its methods and those of its base classes in the package; a method the walker cannot bind also
  holds the config in any parameter named `config` or `cfg` (more rather than less).
- *Fail closed.* A call that passes the config to something the walker cannot resolve (a callback
  parameter, a method of an object of unknown type) is listed; the test fails on any not named in
  SEAMS, and each seam counts as the file it reaches: the task seam (`task.rewards(..., config)`,
  a task's `problems_from_seed(config, count)`) reaches the one file of the run's `data.task`
  (tasks/countdown.py, tasks/lean.py, or a module outside the package), counted once, since a run
  has one task.

The self-tests below run the walker on a small package written to tmp_path.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass, field
from pathlib import Path

import prover_cli

START = "prover_cli.es.train.train_es"
MAX_FILES = 8
TASK_FILE = "<the module of data.task>"  # the Task protocol (tasks/__init__.py) is implemented per task
# Calls the walker cannot resolve that hand the config on through a registry seam:
# (function, callee as written) -> the file that stands for in the count
SEAMS: dict[tuple[str, str], str] = {
    ("prover_cli.policy.rollout.score", "task.rewards"): TASK_FILE,
    ("prover_cli.tasks.problems.generated_problems", "make"): TASK_FILE,  # tasks.problem_generator(name)
}

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


# ---------------------------------------------------------------------------------------------
# The package: modules, their definitions and the names they bind
# ---------------------------------------------------------------------------------------------

@dataclass
class Def:
    module: str
    node: ast.AST
    cls: str | None = None  # the class qualname, for a method


class Package:
    def __init__(self, package_dir: Path):
        self.modules: dict[str, ast.Module] = {}
        for path in sorted(package_dir.rglob("*.py")):
            parts = path.relative_to(package_dir.parent).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            self.modules[name] = ast.parse(path.read_text(), filename=str(path))
            self.modules[name].is_package = path.name == "__init__.py"
        self.defs: dict[str, Def] = {}
        self.bindings: dict[str, dict[str, str]] = {}  # module -> name -> dotted target (imports)
        self.values: dict[str, dict[str, ast.expr]] = {}  # module -> name -> module-level value
        for module, tree in self.modules.items():
            self.bindings[module] = imports(module, tree.is_package, tree.body)
            self.values[module] = {}
            for node in tree.body:
                if isinstance(node, (*_DEFS, ast.ClassDef)):
                    self.defs[f"{module}.{node.name}"] = Def(module, node)
                if isinstance(node, ast.ClassDef):
                    for sub in node.body:
                        if isinstance(sub, _DEFS):
                            self.defs[f"{module}.{node.name}.{sub.name}"] = Def(module, sub, f"{module}.{node.name}")
                elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                    self.values[module][node.targets[0].id] = node.value
                elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
                    self.values[module][node.target.id] = node.value

    def lookup(self, dotted: str, seen: frozenset = frozenset()) -> list[str]:
        """`a.b.c` -> the definitions it names (through re-exports and aliases); [] when it leaves
        the package; ["?"] when it is in the package but names nothing the walker knows."""
        if dotted in seen:
            return ["?"]
        seen = seen | {dotted}
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            module = ".".join(parts[:i])
            if module in self.modules:
                return self._in_module(module, parts[i:], seen)
        return []

    def _in_module(self, module: str, rest: list[str], seen: frozenset) -> list[str]:
        if not rest:
            return [f"module:{module}"]
        head, tail = rest[0], rest[1:]
        qualname = f"{module}.{head}"
        if qualname in self.defs:
            if not tail:
                return [qualname]
            return [f"{qualname}.{tail[0]}"] if len(tail) == 1 and f"{qualname}.{tail[0]}" in self.defs else ["?"]
        if head in self.bindings[module]:
            return self.lookup(".".join([self.bindings[module][head], *tail]), seen)
        if head in self.values[module]:
            found = []
            for target in self.resolve(self.values[module][head], Scope(module), seen):
                found += self.lookup(".".join([target, *tail]), seen) if tail and target != "?" else [target]
            return found
        return ["?"]

    def resolve(self, expr: ast.expr, scope: "Scope", seen: frozenset = frozenset()) -> list[str]:
        """What a callee expression names: definitions, "module:m", "?" (unknown), or [] (outside)."""
        if isinstance(expr, ast.Name):
            if expr.id in scope.nested:
                return [f"nested:{expr.id}"]
            if expr.id == scope.cls_param and scope.cls:
                return [scope.cls]
            if expr.id in scope.imports:
                return self.lookup(scope.imports[expr.id], seen)
            if expr.id in scope.locals:
                return ["?"]
            if f"{scope.module}.{expr.id}" in self.defs or expr.id in self.bindings[scope.module] \
                    or expr.id in self.values[scope.module]:
                return self._in_module(scope.module, [expr.id], seen)
            return [] if hasattr(builtins, expr.id) else ["?"]
        if isinstance(expr, ast.Attribute):
            value = expr.value
            if isinstance(value, ast.Name) and value.id in (scope.self_param, scope.cls_param) and scope.cls:
                return [self.method(scope.cls, expr.attr)]
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super" \
                    and scope.cls:
                return [self.method(base, expr.attr) for base in self.bases(scope.cls)] or ["?"]
            found = []
            for base in self.resolve(value, scope, seen):
                if base.startswith("module:"):
                    found += self.lookup(f"{base[7:]}.{expr.attr}", seen)
                elif base in self.defs and isinstance(self.defs[base].node, ast.ClassDef):
                    found.append(self.method(base, expr.attr))
                elif base:
                    found.append("?")
            return found
        if isinstance(expr, ast.Subscript):  # REGISTRY[key]: every entry of a literal at module level
            found = self.literal(expr.value, scope)
            if found is None:
                return ["?"]
            module, name, literal = found
            entries = literal.values if isinstance(literal, ast.Dict) else literal.elts
            # filled at run time (`_REGISTRY[name] = factory` in a register hook): what it holds is unknown
            filled = any(isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)
                         and n.value.id == name for n in ast.walk(self.modules[module]))
            return [target for entry in entries for target in self.resolve(entry, Scope(module), seen)] \
                + (["?"] if filled or not entries else [])
        return ["?"]

    def literal(self, expr: ast.expr, scope: "Scope") -> tuple[str, str, ast.expr] | None:
        """The module-level dict, list or tuple literal `expr` names, with its module and name."""
        dotted = None
        if isinstance(expr, ast.Name) and expr.id not in scope.locals:
            dotted = scope.imports.get(expr.id) or self.bindings[scope.module].get(expr.id) \
                or f"{scope.module}.{expr.id}"
        elif isinstance(expr, ast.Attribute):
            modules = [t[7:] for t in self.resolve(expr.value, scope) if t.startswith("module:")]
            dotted = f"{modules[0]}.{expr.attr}" if modules else None
        if dotted is None:
            return None
        module, _, name = dotted.rpartition(".")
        value = self.values.get(module, {}).get(name)
        return (module, name, value) if isinstance(value, (ast.Dict, ast.List, ast.Tuple)) else None

    def method(self, cls: str, name: str) -> str:
        for owner in [cls, *self.bases(cls)]:
            if f"{owner}.{name}" in self.defs:
                return f"{owner}.{name}"
        return "?"

    def bases(self, cls: str) -> list[str]:
        """The class's base classes in the package, nearest first."""
        found = []
        for base in self.defs[cls].node.bases:
            for target in self.resolve(base, Scope(self.defs[cls].module)):
                if target in self.defs and isinstance(self.defs[target].node, ast.ClassDef) and target not in found:
                    found += [target, *self.bases(target)]
        return found


def imports(module: str, is_package: bool, body: list[ast.stmt]) -> dict[str, str]:
    """Names bound by the import statements in `body` (and in anything nested in it)."""
    bound = {}
    for node in (n for stmt in body for n in ast.walk(stmt)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package holding this file, level - 1 packages up
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[:len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{base}.{alias.name}"
    return bound


@dataclass
class Scope:
    module: str
    cls: str | None = None
    self_param: str | None = None
    cls_param: str | None = None
    imports: dict[str, str] = field(default_factory=dict)
    locals: set[str] = field(default_factory=set)
    nested: dict[str, ast.AST] = field(default_factory=dict)


def function_scope(package: Package, definition: Def) -> Scope:
    node = definition.node
    decorators = {d.id if isinstance(d, ast.Name) else getattr(d, "attr", "") for d in node.decorator_list}
    first = node.args.posonlyargs + node.args.args
    first_name = first[0].arg if first and definition.cls and "staticmethod" not in decorators else None
    scope = Scope(definition.module, definition.cls,
                  self_param=first_name if "classmethod" not in decorators else None,
                  cls_param=first_name if "classmethod" in decorators else None,
                  imports=imports(definition.module, package.modules[definition.module].is_package, node.body))
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            scope.locals.add(sub.id)
        elif isinstance(sub, ast.arg):
            scope.locals.add(sub.arg)
        elif isinstance(sub, _DEFS) and sub is not node:
            scope.nested[sub.name] = sub
    scope.locals -= set(scope.imports)
    return scope


# ---------------------------------------------------------------------------------------------
# The walk
# ---------------------------------------------------------------------------------------------

@dataclass
class Walk:
    reached: dict[str, str]  # qualname -> module
    unresolved: list[tuple[str, str, int]]  # (function, callee as written, line)

    @property
    def files(self) -> list[str]:
        return sorted(set(self.reached.values()))

    def listing(self) -> str:
        lines = [f"{len(self.reached)} functions/classes in {len(self.files)} files:"]
        for module in self.files:
            lines.append(f"  {module}: " + ", ".join(sorted(q[len(module) + 1:] for q, m in self.reached.items()
                                                           if m == module)))
        return "\n".join(lines)


def bind(function: ast.AST, call: ast.Call, holds, skip_first: bool) -> set[str]:
    """The parameters of `function` that receive the config from `call`."""
    args = function.args
    positional = [a.arg for a in args.posonlyargs + args.args][1 if skip_first else 0:]
    named = {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}
    bound = set()
    for i, arg in enumerate(call.args):
        if isinstance(arg, ast.Starred) and holds(arg.value):
            bound |= {p for p in named if p in ("config", "cfg")} | ({args.vararg.arg} if args.vararg else set())
        elif holds(arg):
            bound |= {positional[i]} if i < len(positional) else ({args.vararg.arg} if args.vararg else set())
    for keyword in call.keywords:
        if keyword.arg is None and holds(keyword.value):  # **kwargs: whichever parameter takes it
            bound |= {p for p in named if p in ("config", "cfg")} | ({args.kwarg.arg} if args.kwarg else set())
        elif keyword.arg is not None and holds(keyword.value):
            bound |= {keyword.arg} if keyword.arg in named else ({args.kwarg.arg} if args.kwarg else set())
    return bound


class Walker:
    def __init__(self, package: Package):
        self.package = package
        self.reached: dict[str, str] = {}  # qualname -> module
        self.held: dict[str, set[str]] = {}  # function -> the local names holding the config
        self.class_attrs: dict[str, set[str]] = {}  # class -> the self attributes holding it
        self.unresolved: set[tuple[str, str, int]] = set()
        self.queue: list[str] = []

    def run(self, start: str, start_params: set[str]) -> Walk:
        self.reach(start, start_params)
        while self.queue:
            self.visit(self.queue.pop())
        return Walk(self.reached, sorted(self.unresolved))

    def reach(self, qualname: str, names: set[str]) -> None:
        """`qualname` is called with the config in its parameters `names`."""
        definition = self.package.defs[qualname]
        if isinstance(definition.node, ast.ClassDef):
            return self._reach_class(qualname, names)
        if definition.cls and definition.cls not in self.reached:
            self._reach_class(definition.cls, set())
        before = set(self.held.get(qualname, ()))
        self.held.setdefault(qualname, set()).update(names)
        if qualname not in self.reached or self.held[qualname] != before:
            self.reached[qualname] = definition.module
            self.queue.append(qualname)

    def _reach_class(self, qualname: str, names: set[str]) -> None:
        """A class reached reaches every method of its own and of its bases; `names` are the
        constructor's parameters that take the config."""
        if qualname not in self.reached:
            for cls in [qualname, *self.package.bases(qualname)]:
                self.reached[cls] = self.package.defs[cls].module
                for sub in self.package.defs[cls].node.body:
                    if isinstance(sub, _DEFS):
                        self.reach(f"{cls}.{sub.name}", {a.arg for a in ast.walk(sub.args)
                                                         if isinstance(a, ast.arg) and a.arg in ("config", "cfg")})
        init = self.package.method(qualname, "__init__")
        if init != "?":
            self.reach(init, names)
        else:  # a dataclass: the constructor stores its arguments in fields of those names
            self.class_attrs.setdefault(qualname, set()).update(names)

    def holds(self, expr: ast.expr | None, names: set[str], scope: Scope) -> bool:
        if isinstance(expr, ast.Name):
            return expr.id in names
        if isinstance(expr, ast.Attribute) and isinstance(expr.value, ast.Name) and scope.cls:
            return expr.value.id == scope.self_param and expr.attr in self.class_attrs.get(scope.cls, set())
        if isinstance(expr, (ast.Tuple, ast.List)):  # Thread(args=(config,)): more rather than less
            return any(self.holds(e, names, scope) for e in expr.elts)
        if isinstance(expr, ast.IfExp):
            return self.holds(expr.body, names, scope) or self.holds(expr.orelse, names, scope)
        if isinstance(expr, ast.BoolOp):
            return any(self.holds(v, names, scope) for v in expr.values)
        if isinstance(expr, ast.NamedExpr):
            return self.holds(expr.value, names, scope)
        if isinstance(expr, ast.Call) and expr.args and self.holds(expr.args[0], names, scope):  # a changed copy
            bound = {**self.package.bindings[scope.module], **scope.imports}
            return "dataclasses.replace" in _dotted(expr.func, bound)
        return False

    def visit(self, qualname: str) -> None:
        definition = self.package.defs[qualname]
        scope = function_scope(self.package, definition)
        names = self.held[qualname]
        self._aliases(definition.node, names, scope)
        for node in ast.walk(definition.node):
            if isinstance(node, ast.Call) and any(self.holds(a.value if isinstance(a, ast.Starred) else a, names, scope)
                                                  for a in [*node.args, *(k.value for k in node.keywords)]):
                self._follow(qualname, node, names, scope)

    def _aliases(self, function: ast.AST, names: set[str], scope: Scope) -> None:
        """Add to `names` every local that comes to hold the config, and to the class's attributes
        every `self.x` assigned it; repeated until nothing changes (an alias may be assigned after a use)."""
        holds = lambda expr: self.holds(expr, names, scope)  # noqa: E731
        changed = True
        while changed:
            changed = False
            for node in ast.walk(function):
                pairs = []
                if isinstance(node, ast.Assign):
                    pairs = [(t, node.value) for t in node.targets]
                elif isinstance(node, (ast.AnnAssign, ast.NamedExpr)) and node.value is not None:
                    pairs = [(node.target, node.value)]
                elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in scope.nested:
                    new = bind(scope.nested[node.func.id], node, holds, skip_first=False) - names
                    names.update(new)  # a nested function's parameters: its body is walked with this one
                    changed = changed or bool(new)
                for target, value in pairs:
                    if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple):
                        pairs += list(zip(target.elts, value.elts))
                    elif isinstance(target, ast.Name) and holds(value) and target.id not in names:
                        names.add(target.id)
                        changed = True
                    elif isinstance(target, ast.Attribute) and scope.cls and holds(value) \
                            and isinstance(target.value, ast.Name) and target.value.id == scope.self_param \
                            and target.attr not in self.class_attrs.setdefault(scope.cls, set()):
                        self.class_attrs[scope.cls].add(target.attr)  # every method of the class now holds it
                        self.queue.extend(m for m in self.reached if self.package.defs[m].cls == scope.cls)

    def _follow(self, qualname: str, call: ast.Call, names: set[str], scope: Scope) -> None:
        """`call` passes the config: reach what it calls, or list it as unresolved."""
        holds = lambda expr: self.holds(expr, names, scope)  # noqa: E731
        package = self.package
        targets = package.resolve(call.func, scope)
        if not targets and any(t in package.defs for a in [*call.args, *(k.value for k in call.keywords)]
                               if isinstance(a, (ast.Name, ast.Attribute)) for t in package.resolve(a, scope)):
            self.unresolved.add((qualname, ast.unparse(call.func), call.lineno))  # partial(f, config) and the like
        for target in targets:
            if target.startswith("nested:"):
                continue  # its body is part of this function's, walked with it
            if target == "?" or target.startswith("module:"):
                self.unresolved.add((qualname, ast.unparse(call.func), call.lineno))
                continue
            callee = package.defs[target]
            init = package.method(target, "__init__") if isinstance(callee.node, ast.ClassDef) else None
            if init == "?":  # a dataclass: positional arguments fill the annotated fields in order
                fields_ = [s.target.id for s in callee.node.body if isinstance(s, ast.AnnAssign)]
                self.reach(target, {f for f, arg in zip(fields_, call.args) if holds(arg)}
                           | {k.arg for k in call.keywords if k.arg and holds(k.value)})
                continue
            function = package.defs[init].node if init else callee.node
            decorators = {getattr(d, "id", getattr(d, "attr", "")) for d in function.decorator_list}
            bound_method = init is not None or (callee.cls is not None and "staticmethod" not in decorators and (
                "classmethod" in decorators or _is_instance_call(call.func, scope)))
            self.reach(target, bind(function, call, holds, skip_first=bound_method))


def walk(package: Package, start: str, start_params: set[str] = frozenset({"config"})) -> Walk:
    return Walker(package).run(start, set(start_params))


def _dotted(expr: ast.expr, bound: dict[str, str]) -> list[str]:
    """The dotted name outside the package that `expr` names (for `dataclasses.replace`)."""
    if isinstance(expr, ast.Name):
        return [bound.get(expr.id, expr.id)]
    if isinstance(expr, ast.Attribute):
        return [f"{d}.{expr.attr}" for d in _dotted(expr.value, bound)]
    return []


def _is_instance_call(func: ast.expr, scope: Scope) -> bool:
    """`self.m(...)`, `super().m(...)` or `obj.m(...)`: the first parameter is bound already;
    `Class.m(obj, ...)` passes it."""
    if not isinstance(func, ast.Attribute):
        return False
    value = func.value
    if isinstance(value, ast.Name) and value.id == scope.self_param:
        return True
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"


def package_walk(package_dir: Path, start: str, start_params=frozenset({"config"})) -> Walk:
    return walk(Package(package_dir), start, set(start_params))


# ---------------------------------------------------------------------------------------------
# The bound on prover_cli
# ---------------------------------------------------------------------------------------------

def test_the_walk_of_config_from_train_es_stays_in_at_most_8_files():
    result = package_walk(Path(prover_cli.__file__).parent, START)
    assert START in result.reached
    unknown = [u for u in result.unresolved if u[:2] not in SEAMS]
    assert not unknown, ("calls passing the whole config to something the walker cannot resolve (pass the "
                         f"sections it reads, or name the seam in SEAMS): {unknown}\n{result.listing()}")
    files = sorted({*result.files, *(SEAMS[u[:2]] for u in result.unresolved)})
    assert len(files) <= MAX_FILES, f"{len(files)} files: {files}\n{result.listing()}\nseams: {result.unresolved}"
    assert {"prover_cli.es.train", "prover_cli.es.population", "prover_cli.policy.rollout"} <= set(files)  # the walk ran


# ---------------------------------------------------------------------------------------------
# The walker on a small package in tmp_path
# ---------------------------------------------------------------------------------------------

def write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def synthetic(tmp_path: Path, files: dict[str, str], start: str = "pkg.main.start") -> Walk:
    files = {"__init__.py": "", **files}
    return package_walk(write_package(tmp_path, files), start)


def test_walker_follows_an_alias_and_not_a_section(tmp_path):
    result = synthetic(tmp_path, {
        "main.py": "from pkg.a import whole, section\n"
                   "def start(config):\n    c = config\n    whole(c)\n    section(config.es)\n",
        "a.py": "def whole(settings):\n    pass\ndef section(es):\n    pass\n",
    })
    assert set(result.reached) == {"pkg.main.start", "pkg.a.whole"}
    assert result.files == ["pkg.a", "pkg.main"]


def test_walker_binds_by_position_and_keyword_whatever_the_parameter_is_called(tmp_path):
    result = synthetic(tmp_path, {
        "main.py": "from pkg import a\n"
                   "def start(config):\n    a.first(1, config)\n    a.second(x=1, run=config)\n",
        "a.py": "from pkg.b import onward, other\n"
                "def first(n, settings):\n    onward(settings)\n    other(n)\n"
                "def second(x, run):\n    pass\n",
        "b.py": "def onward(s):\n    pass\ndef other(n):\n    pass\n",
    })
    assert set(result.reached) == {"pkg.main.start", "pkg.a.first", "pkg.a.second", "pkg.b.onward"}


def test_walker_resolves_reexports_relative_and_lazy_imports(tmp_path):
    result = synthetic(tmp_path, {
        "sub/__init__.py": "from .impl import helper as exported\nalias = exported\n",
        "sub/impl.py": "def helper(config):\n    from ..deep import leaf\n    leaf(config)\n",
        "deep.py": "def leaf(config):\n    pass\n",
        "main.py": "def start(config):\n    import pkg.sub as s\n    s.alias(config)\n",
    })
    assert set(result.reached) == {"pkg.main.start", "pkg.sub.impl.helper", "pkg.deep.leaf"}
    assert result.files == ["pkg.deep", "pkg.main", "pkg.sub.impl"]


def test_a_class_constructed_with_config_reaches_its_methods_and_what_they_pass_it_to(tmp_path):
    result = synthetic(tmp_path, {
        "main.py": "from pkg.k import Worker\n"
                   "def start(config):\n    w = Worker(config)\n    w.go()\n",
        "k.py": "from pkg.base import Base\nfrom pkg.far import far\n"
                "class Worker(Base):\n    def __init__(self, cfg):\n        self.settings = cfg\n"
                "    def go(self):\n        self._helper()\n"
                "    def _helper(self):\n        far(self.settings)\n",
        "base.py": "class Base:\n    def shared(self):\n        pass\n",
        "far.py": "def far(config):\n    pass\ndef unrelated(config):\n    pass\n",
    })
    assert set(result.reached) == {"pkg.main.start", "pkg.k.Worker", "pkg.k.Worker.__init__", "pkg.k.Worker.go",
                                   "pkg.k.Worker._helper", "pkg.base.Base", "pkg.base.Base.shared", "pkg.far.far"}


def test_walker_follows_classmethods_registries_and_closures(tmp_path):
    result = synthetic(tmp_path, {
        "main.py": "from pkg.r import Run, OPENERS\n"
                   "def start(config, name):\n    Run.open(config)\n    OPENERS[name](config)\n"
                   "    later = lambda: inner(config)\n"
                   "    def inner(cfg_again):\n        from pkg.r import deep\n        deep(cfg_again)\n",
        "r.py": "class Run:\n    @classmethod\n    def open(cls, config):\n        return cls(config)\n"
                "    def __init__(self, config):\n        pass\n"
                "def a(config):\n    pass\ndef b(config):\n    pass\nOPENERS = {'a': a, 'b': b}\n"
                "def deep(config):\n    pass\n",
    })
    assert {"pkg.r.Run.open", "pkg.r.Run", "pkg.r.Run.__init__", "pkg.r.a", "pkg.r.b", "pkg.r.deep"} \
        <= set(result.reached)
    assert result.unresolved == []


def test_a_registry_filled_at_run_time_is_unresolved(tmp_path):
    result = synthetic(tmp_path, {
        "main.py": "_REGISTRY = {}\ndef register(name):\n    def deco(f):\n        _REGISTRY[name] = f\n"
                   "        return f\n    return deco\n"
                   "def start(config, name):\n    _REGISTRY[name](config)\n",
    })
    assert [(callee, line) for _, callee, line in result.unresolved] == [("_REGISTRY[name]", 8)]


def test_walker_lists_what_it_cannot_resolve(tmp_path):
    result = synthetic(tmp_path, {
        "main.py": "import json\nimport functools\nimport threading\n"
                   "def start(config, callback, thing):\n    callback(config)\n    thing.method(config)\n"
                   "    json.dumps(config)\n    print(config)\n    config.to_dict()\n"
                   "    functools.partial(helper, config)\n    threading.Thread(target=helper, args=(config,))\n"
                   "def helper(config):\n    pass\n",
    })
    assert set(result.reached) == {"pkg.main.start"}
    assert [(callee, line) for _, callee, line in result.unresolved] == [
        ("callback", 5), ("functools.partial", 10), ("thing.method", 6), ("threading.Thread", 11)]
