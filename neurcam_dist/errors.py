"""Every error the service raises on purpose, under one base: ``NeurcamError``.

Catch ``NeurcamError`` to tell the service's own refusals from bugs and library failures. Each
class also derives from the built-in a caller would expect, so code written against
scikit-learn's contract (``ValueError`` for bad input) or Python's (``FileNotFoundError``) keeps
working:

- ``ConfigError`` (a ``ValueError``): a config file, a hyperparameter or a flag that cannot be
  used (names the field)
- ``DataError`` (a ``ValueError``): input rows, files or columns that cannot be trained on or
  scored (names file and column)
- ``ModelFileError`` (a ``ValueError``): a saved model that cannot be read back
- ``TrainingError`` (a ``RuntimeError``): a run that started and failed (Ray workers)
- ``SearchError`` (a ``RuntimeError``): a search in which no trial finished
- ``TrackingError`` (a ``RuntimeError``): MLflow logging that failed after training
- ``LeaseTimeout`` (a ``RuntimeError``): the promotion lease held by another process
- ``NotPublishedError`` (a ``FileNotFoundError``): no neurcam output at a URI
- ``CredentialsRefused`` (a ``ConnectionError``): a server that refuses the credentials

The CLI maps them to exit statuses: a ``ValueError`` (bad input, nothing ran) exits 2, a
``RuntimeError`` (a run that failed) or ``ConnectionError`` exits 1.

Errors raised inside a Ray task or actor come back wrapped by Ray; ``find_cause`` walks the
chain of causes to the one the service raised, so no caller reads an error's printed text.
"""
from __future__ import annotations


class NeurcamError(Exception):
    """The base of every error the service raises on purpose.

    ``message`` keeps the text it was raised with: Ray appends its retry advice to the ``args``
    of an error raised in a task, and the attribute survives the trip back unchanged.
    """

    def __init__(self, *args):
        super().__init__(*args)
        self.message = str(args[0]) if args else ""


class ConfigError(NeurcamError, ValueError):
    """A configuration, hyperparameter or command-line value that cannot be used; the message
    names the file (where there is one) and each bad field."""


class DataError(NeurcamError, ValueError):
    """Input data that cannot be trained on or scored; the message names the file(s), column(s)
    and, where it can, the row."""


class ModelFileError(NeurcamError, ValueError):
    """A saved model directory that cannot be read back (incomplete, corrupt, or from a newer
    version); the message names the file."""


class TrainingError(NeurcamError, RuntimeError):
    """A run that started and failed: the message says which run and where its files are."""


class OutputError(NeurcamError, RuntimeError):
    """Training succeeded but its outputs could not be written (a full or read-only disk): the
    message says where they could not go, why, where the fitted model was kept instead and what
    to run again."""


class SearchError(NeurcamError, RuntimeError):
    """No trial of the search finished; the message lists each trial's reason."""


class TrackingError(NeurcamError, RuntimeError):
    """Training succeeded but MLflow logging did not: the CLI exits non-zero and says what is
    missing."""


class LeaseTimeout(NeurcamError, RuntimeError):
    """Another process held the promotion lease for longer than we were willing to wait."""


class Unreachable(NeurcamError, ConnectionError):
    """A server the service needs (the Ray cluster, its job server, the MLflow tracking server)
    did not answer, or not in time."""


class CredentialsRefused(NeurcamError, ConnectionError):
    """A server that answers but refuses the credentials (HTTP 401/403): waiting will not help."""


class NotPublishedError(NeurcamError, FileNotFoundError):
    """No neurcam output at a URI (no manifest there or in a parent)."""


def find_cause(exc: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first exception of type ``kind`` in ``exc``'s chain: ``exc`` itself, its
    ``__cause__`` / ``__context__``, and the ``cause`` Ray attaches to a ``RayTaskError`` (Ray
    Data and Ray Train re-raise a task's error wrapped in their own exceptions).

    Parameters
    ----------
    exc : BaseException
        The exception caught.
    kind : type
        The class to look for (``DataError``, say).

    Returns
    -------
    BaseException or None
        The first match, or None when the chain holds none.
    """
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, kind):
            inner = getattr(e, "cause", None)   # Ray's wrapper is an instance of the cause's class too
            return find_cause(inner, kind) if isinstance(inner, kind) else e
        todo += [getattr(e, "cause", None), e.__cause__, e.__context__]
    return None



def refusal_as(base: type, exc: NeurcamError, **kwargs) -> Exception:
    """``exc``'s message as an error of class ``base`` too (built with ``kwargs``), still a
    ``NeurcamError``, whose message is set once: a framework that rewrites the message of an
    error it catches (MLflow's scoring server prefixes the whole input) answers with ours alone.
    ``tracking.registry.served_refusal`` makes the registry model's refusals ``MlflowException``s."""

    class Refusal(base, NeurcamError):
        """A refusal in ``base``'s family; its message is the first one set."""

        @property
        def message(self) -> str:
            return self._said

        @message.setter
        def message(self, value: str) -> None:
            if not hasattr(self, "_said"):
                self._said = value

    return Refusal(exc.message or str(exc), **kwargs)
