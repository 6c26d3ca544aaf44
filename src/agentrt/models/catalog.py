"""The configured models: the default and the others a session may be switched to.

`ModelCatalog` holds the names (specs such as ``openai:gpt-4o``) of the models
the configuration offers, the default first, and makes each `Model` once, the
first time it is asked for. `entries` says of each whether it can be used now
and, when not, why (no API key for a hosted API, a replay file that cannot be
read): the same words a run of it would be refused with.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from collections.abc import Sequence

import attrs

from ..core.errors import ModelNotConfiguredError
from ..core.errors import UnknownModelError
from ..core.errors import check_model_ready
from ..vocab.reprs import mutable
from ..vocab.reprs import record
from .messages import Model


@record
class ModelEntry:
    """One configured model as listed: its name, whether it is the default, and whether it
    can be used now (`why` says why not)."""

    name: str
    default: bool
    usable: bool
    why: str | None = None


@mutable(eq=False)
class ModelCatalog:
    """The models a session may run with, each made once, when first asked for."""

    #: The names, the default first.
    names: tuple[str, ...]
    #: Makes the model of a name; a ValueError or OSError says why it cannot be made.
    make: Callable[[str], Model] = attrs.field(repr=False)
    _made: dict[str, Model] = attrs.field(factory=dict, init=False, repr=False)
    #: Held while a model is made: a resume asks from the store's thread (see
    #: `Executor.resume`), and a model is made once whichever thread asks first.
    _making: threading.Lock = attrs.field(factory=threading.Lock, init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        if not self.names:
            raise ValueError("a catalog of models needs at least the default one")

    @classmethod
    def of(
        cls,
        default: Model,
        name: str,
        others: Sequence[str] = (),
        make: Callable[[str], Model] | None = None,
    ) -> ModelCatalog:
        """A catalog whose default, `name`, is the model `default`, made already."""

        def refuse(spec: str) -> Model:
            raise ValueError(f"model {spec!r} cannot be made here")

        catalog = cls(tuple(dict.fromkeys((name, *others))), make or refuse)
        catalog._made[name] = default
        return catalog

    def use_default(self, model: Model) -> None:
        """Make `model` the default's model (an embedder may give an executor another)."""
        self._made[self.default] = model

    @property
    def default(self) -> str:
        """The name of the default model."""
        return self.names[0]

    def get(self, name: str | None) -> Model:
        """The model `name` names (None: the default), made on first use.

        Raises `UnknownModelError` for a name that is not configured and
        `ModelNotConfiguredError` for one that cannot be made.
        """
        name = self.default if name is None else name
        made = self._made.get(name)
        if made is not None:
            return made
        if name not in self.names:
            raise UnknownModelError(
                f"model {name!r} is not configured; the models are: {', '.join(self.names)} "
                "(add it to the models list in config.toml)"
            )
        with self._making:
            made = self._made.get(name)  # made meanwhile by another thread
            if made is not None:
                return made
            try:
                made = self.make(name)
            except (ValueError, OSError) as exc:
                raise ModelNotConfiguredError(f"model {name} cannot be used: {exc}") from None
            self._made[name] = made
        return made

    def ready(self, name: str | None) -> Model:
        """`get`, and refused (`ModelNotConfiguredError`) when it cannot be asked now."""
        model = self.get(name)
        check_model_ready(model)
        return model

    def entries(self) -> list[ModelEntry]:
        """Every configured model, the default first, with whether it can be used now."""
        out = []
        for name in self.names:
            try:
                self.ready(name)
            except ModelNotConfiguredError as exc:
                out.append(ModelEntry(name, name == self.default, False, str(exc)))
            else:
                out.append(ModelEntry(name, name == self.default, True))
        return out
