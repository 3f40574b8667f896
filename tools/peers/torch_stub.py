"""A stand-in for torch and triton, for compiling FA4's kernels without a GPU (tools/peer_sass.sh).

FA4 and quack import torch and triton at module level (tensor conversion, autotuning, the public
interface), but compiling a kernel from CuTe DSL symbolic tensors runs none of it. Installed as a
meta-path finder by a .pth line, so `import torch` anywhere yields a module whose every attribute is an
inert placeholder: calling it returns another placeholder, used as a decorator it returns what it
decorates, it is falsy and iterates as empty. Never on a path where torch itself is needed."""
import importlib.abc
import importlib.machinery
import sys
import types

STUBBED = ("torch", "triton")


class Placeholder:
    def __init__(self, name):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, key):
        if key.startswith("__") and key.endswith("__"):
            raise AttributeError(key)
        return Placeholder(f"{self._name}.{key}")

    def __call__(self, *args, **kwargs):
        # A decorator (@torch.library.custom_op(...), @triton.jit, ...) keeps a class as it is and a function
        # callable, with placeholders for what is asked of it later (f.register_fake(...)).
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], Placeholder):
            return args[0] if isinstance(args[0], type) else Decorated(args[0])
        return Placeholder(f"{self._name}()")

    def __getitem__(self, key):
        return Placeholder(f"{self._name}[]")

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return False

    def __hash__(self):
        return hash(self._name)

    def __eq__(self, other):
        return isinstance(other, Placeholder) and other._name == self._name

    def __or__(self, other):  # (type hints such as torch.Tensor | None)
        return Placeholder(f"{self._name}|")

    __ror__ = __or__

    def __mro_entries__(self, bases):  # (class X(torch.autograd.Function): ...)
        return (object,)

    def __repr__(self):
        return f"<stub {self._name}>"


class Decorated:
    def __init__(self, fn):
        self._fn = fn
        self.__wrapped__ = fn
        self.__name__ = getattr(fn, "__name__", "decorated")
        self.__doc__ = getattr(fn, "__doc__", None)

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)

    def __getattr__(self, key):
        if key.startswith("__") and key.endswith("__"):
            raise AttributeError(key)
        return Placeholder(f"{self.__name__}.{key}")


class StubModule(types.ModuleType):
    # Names used in isinstance checks and annotations must be classes.
    CLASSES = ("Tensor", "dtype", "device", "Size", "Generator", "Stream")

    def __getattr__(self, key):
        if key.startswith("__") and key.endswith("__"):
            raise AttributeError(key)
        value = type(key, (), {}) if key in self.CLASSES else Placeholder(f"{self.__name__}.{key}")
        setattr(self, key, value)
        return value


class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = StubModule(spec.name)
        module.__path__ = []
        module.__version__ = "2.11.0"
        return module

    def exec_module(self, module):
        pass


if not any(isinstance(f, Finder) for f in sys.meta_path):
    sys.meta_path.insert(0, Finder())
