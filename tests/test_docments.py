"""Every public function, method and class `__init__` of the package says what each parameter is, in a docments
comment after it (`def f(x: int,  # what x is`): nbdev's `show_doc` puts these comments in the docs."""
import importlib, inspect, pkgutil
from dataclasses import fields, is_dataclass
from fastcore.docments import docments
import longctx_nb

# (qualified name, parameter) pairs that need no comment; keep this short and say why
ALLOW: set[tuple[str, str]] = set()

def modules():
    "Every public module of the package."
    names = [m.name for m in pkgutil.walk_packages(longctx_nb.__path__, 'longctx_nb.')
             if not any(part.startswith('_') for part in m.name.split('.'))]
    return [importlib.import_module(n) for n in names]

def api(mod):
    "(qualified name, callable or dataclass) of the public symbols `mod` defines: functions, classes and their methods."
    for name in getattr(mod, '__all__', []):
        obj = getattr(mod, name)
        if name.startswith('_') or getattr(obj, '__module__', None) != mod.__name__: continue
        if inspect.isfunction(obj): yield f'{mod.__name__}.{name}', obj
        if not inspect.isclass(obj): continue
        if is_dataclass(obj): yield f'{mod.__name__}.{name}', obj
        for k, v in vars(obj).items():  # methods the class defines itself (properties are not checked)
            if k.startswith('_') and (k != '__init__' or is_dataclass(obj)): continue  # a dataclass's fields are its doc
            if isinstance(v, (staticmethod, classmethod)): v = v.__func__
            if inspect.isfunction(v): yield f'{mod.__name__}.{name}.{k}', v

def undocumented(qn, obj) -> list[str]:
    "Parameters of `obj` without a docments comment (a dataclass field may carry its help in `opt`'s metadata instead)."
    docs = docments(obj, args_kwargs=True)
    helped = {f.name for f in fields(obj) if f.metadata.get('help')} if is_dataclass(obj) else set()
    return [p for p, d in docs.items() if p not in ('self', 'cls', 'return') and not d and p not in helped
            and (qn, p) not in ALLOW]

def misread_return(obj) -> bool:
    "Whether `show_doc` would print the `**kwargs` comment as the return's (it does when the `) -> T:` line has none)."
    # fastcore's docments skips `**kwargs` by default, and a comment-less line takes the comment of the line above
    if is_dataclass(obj): return False
    return docments(obj).get('return') != docments(obj, args_kwargs=True).get('return')

def test_every_parameter_has_a_docments_comment():
    found = {qn: obj for mod in modules() for qn, obj in api(mod)}
    assert len(found) > 150, f'only {len(found)} public symbols found: is the package importable?'
    missing = {qn: ps for qn, obj in found.items() if (ps := undocumented(qn, obj))}
    missing.update({qn: ['return (give it a comment: show_doc shows the **kwargs comment there)'] for qn, obj in found.items()
                    if misread_return(obj)})
    assert not missing, ("parameters without a docments comment (add `# what it is` after each one in the notebook's "
                         "signature, or list it in ALLOW with the reason):\n"
                         + '\n'.join(f'  {qn}: {", ".join(ps)}' for qn, ps in sorted(missing.items())))

def test_the_check_sees_missing_comments():
    def f(a: int,  # documented
          b, **kw): pass
    def g(a,  # documented
          *args,  # documented
          **kw,  # documented
         ): pass
    assert undocumented('f', f) == ['b', 'kw']
    assert undocumented('g', g) == []
    def h(a,  # documented
          **kw,  # documented
         ) -> int: pass
    assert misread_return(h) and not misread_return(g)
