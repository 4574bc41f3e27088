"""Scheme: a PDE scheme of several fields, compiled into the tables the
engines run (csrc/scheme.h).

    >>> import convstencil as cs
    >>> u, v = cs.fields("u v")
    >>> L = cs.laplacian(2)
    >>> gs = cs.Scheme({u: u + dt * (Du * L(u) - u * v**2 + F * (1 - u)),
    ...                 v: v + dt * (Dv * L(v) + u * v**2 - (F + k) * v)},
    ...                mode="wrap")
    >>> u1, v1 = cs.apply((u0, v0), gs, steps=1000)

A step is the stages in order (a dict is one stage; a list of dicts is
several); each update of a stage reads the values the fields had when the
stage began, and a field no update of a stage names keeps its value.
"""
import collections

import numpy as np

from . import _engine, _expr
from ._expr import Field

# One term of an update, as the engines and tests/reference.py read it:
# coef * [params[param]] * (stencil correlated with fields[field]) for a
# stencil term (stencil: its weights), or
# coef * [params[param]] * prod(fields[f] ** powers[f]) for a monomial
# (stencil None, field None).  param is a parameter's name or None.
SchemeTerm = collections.namedtuple(
    "SchemeTerm", "coef param stencil field powers")

_KIND_STENCIL, _KIND_MONOMIAL = 0, 1  # cs_term_kind
MAX_FIELDS = 8                        # CS_SCHEME_MAX_FIELDS
MAX_PARAMS = 8                        # CS_SCHEME_MAX_PARAMS


class Scheme:
    """K fields advanced together, one step a list of stages.

    `updates` is a dict ``{field: expression}`` (one stage) or a list of
    such dicts (stages applied in order, each reading what the one before
    wrote: staggered grids, operator splitting).  An expression is built
    from fields (convstencil.fields), parameter fields
    (convstencil.param), stencils applied to fields (``L(u)``, for any
    Stencil, preset or weights) and numbers, with + - * / and integer
    powers 0 to 4; it must expand into terms of a number or one parameter
    field times a stencil of one field or a product of fields.  `mode`
    and `cval` are the boundary of every stencil term (as in apply()).

    ``scheme.fields`` lists the fields in order of first appearance among
    the stages' keys (then any field that is only read); apply() takes
    and returns the grids as a tuple in that order.  ``scheme.params``
    lists the parameter fields' names.

    >>> u, up = convstencil.fields("u up")
    >>> c2 = convstencil.param("c2")       # (c dt / h)**2, per point
    >>> wave = convstencil.Scheme({u: 2 * u - up + c2 * L(u), up: u})
    >>> print(wave)
    """

    def __init__(self, updates, *, mode="constant", cval=0.0):
        stages = _stages_of(updates)
        self.mode = _engine.resolve_mode(mode)
        self.cval = _engine.resolve_cval(cval)
        self._stages = stages
        self.fields = _field_order(stages)
        if len(self.fields) > MAX_FIELDS:
            raise ValueError("a scheme may advance at most %d fields, got %d"
                             " (%s)" % (MAX_FIELDS, len(self.fields),
                                        ", ".join(f.name for f in
                                                  self.fields)))
        _check_names(self.fields)
        self.params, self.stencils = _params_and_stencils(stages)
        if len(self.params) > MAX_PARAMS:
            raise ValueError("a scheme may read at most %d parameter fields,"
                             " got %d" % (MAX_PARAMS, len(self.params)))
        clash = set(self.params) & {f.name for f in self.fields}
        if clash:
            raise ValueError("%s names both a field and a parameter field"
                             % sorted(clash)[0])
        dims = {s.ndim for s in self.stencils}
        if len(dims) > 1:
            raise ValueError("a scheme's stencils must have one number of "
                             "dimensions, got %s"
                             % ", ".join("%s (%dD)" % (_expr.stencil_label(s),
                                                       s.ndim)
                                         for s in self.stencils))
        self.ndim = dims.pop() if dims else None
        self._tables = None

    # -- what it is --------------------------------------------------------

    @property
    def stages(self):
        """The stages as given: a tuple of dicts {field: Expr}."""
        return tuple(dict(stage) for stage in self._stages)

    @property
    def radius(self):
        """The largest stencil radius per axis (0 without stencils)."""
        if not self.stencils:
            return ()
        return tuple(max(s.radius[a] for s in self.stencils)
                     for a in range(self.ndim))

    def updates(self):
        """Per stage, a list of (field index, [SchemeTerm, ...]): the
        terms each update sums, in the order the engines sum them."""
        index = {f: i for i, f in enumerate(self.fields)}
        result = []
        for stage in self._stages:
            result.append([(index[f], [self._term(k, c, index)
                                       for k, c in expr.terms.items()])
                           for f, expr in stage.items()])
        return result

    def _term(self, key, coef, index):
        name, kind, payload = key
        powers = [0] * len(self.fields)
        if kind == _expr.STENCIL:
            stencil, field = payload
            return SchemeTerm(coef, name, stencil.weights, index[field],
                              tuple(powers))
        for f, p in payload:
            powers[index[f]] = p
        return SchemeTerm(coef, name, None, None, tuple(powers))

    def tables(self):
        """The engines' tables (csrc/scheme.h, _core.run_scheme): a dict
        of stencils (weights), coefs, terms, updates and stages."""
        if self._tables is None:
            self._tables = self._build_tables()
        return self._tables

    def _build_tables(self):
        k = len(self.fields)
        stencil_index = {s: i for i, s in enumerate(self.stencils)}
        param_index = {p: i for i, p in enumerate(self.params)}
        coefs, terms, updates, stages = [], [], [], []
        index = {f: i for i, f in enumerate(self.fields)}
        for stage in self._stages:
            stages.append((len(updates), len(stage)))
            for field, expr in stage.items():
                updates.append((index[field], len(terms), len(expr.terms)))
                for (name, kind, payload), coef in expr.terms.items():
                    param = -1 if name is None else param_index[name]
                    row = [0] * (4 + k)
                    row[1] = param
                    if kind == _expr.STENCIL:
                        stencil, f = payload
                        row[0] = _KIND_STENCIL
                        row[2], row[3] = index[f], stencil_index[stencil]
                    else:
                        row[0] = _KIND_MONOMIAL
                        row[2] = row[3] = -1
                        for f, p in payload:
                            row[4 + index[f]] = p
                    coefs.append(coef)
                    terms.append(row)
        tables = {
            "stencils": tuple(s.weights for s in self.stencils),
            "coefs": np.array(coefs, dtype=np.float64).reshape(-1),
            "terms": np.array(terms, dtype=np.int32).reshape(-1, 4 + k),
            "updates": np.array(updates, dtype=np.int32).reshape(-1, 3),
            "stages": np.array(stages, dtype=np.int32).reshape(-1, 2)}
        for value in tables.values():
            if isinstance(value, np.ndarray):
                value.flags.writeable = False
        return tables

    def __repr__(self):
        return "<Scheme of %s: %d stage%s, %d terms%s, mode %r>" % (
            ", ".join(f.name for f in self.fields), len(self._stages),
            "s" if len(self._stages) > 1 else "",
            sum(len(e.terms) for stage in self._stages
                for e in stage.values()),
            ", parameters " + ", ".join(self.params) if self.params else "",
            self.mode)

    def __str__(self):
        labels = _stencil_labels(self.stencils)
        head = "Scheme: fields %s" % ", ".join(f.name for f in self.fields)
        if self.params:
            head += "; parameter fields %s" % ", ".join(self.params)
        head += "; mode %r" % self.mode
        if self.mode == "constant":
            head += ", cval %r" % self.cval
        lines = [head]
        for n, stage in enumerate(self._stages):
            if len(self._stages) > 1:
                lines.append("  stage %d:" % (n + 1))
            for field, expr in stage.items():
                lines.append("  %s%s <- %s" % (
                    "  " if len(self._stages) > 1 else "", field.name,
                    _expr_text(expr, labels)))
        for stencil, label in labels.items():
            lines.append("  %s = %r" % (label, stencil))
        return "\n".join(lines)


# ---------------------------------------------------------------------------

def _stages_of(updates):
    if isinstance(updates, dict):
        raw = [updates]
    elif isinstance(updates, (list, tuple)):
        raw = list(updates)
        if not raw:
            raise ValueError("a scheme needs at least one stage, got an "
                             "empty list")
    else:
        raise TypeError("Scheme takes a dict {field: expression} or a list "
                        "of such dicts (stages), got %s"
                        % type(updates).__name__)
    stages = []
    for n, stage in enumerate(raw):
        where = "stage %d" % (n + 1) if len(raw) > 1 else "the scheme"
        if not isinstance(stage, dict):
            raise TypeError("%s: a stage is a dict {field: expression}, got "
                            "%s" % (where, type(stage).__name__))
        if not stage:
            raise ValueError("%s updates no field" % where)
        exprs = {}
        for field, value in stage.items():
            if not isinstance(field, Field):
                raise TypeError("%s: keys must be fields (convstencil."
                                "fields), got %r" % (where, field))
            try:
                exprs[field] = _expr.as_expr(value)
            except (TypeError, ValueError) as exc:
                raise type(exc)("%s, update of %s: %s"
                                % (where, field.name, exc)) from None
        stages.append(exprs)
    return stages


def _field_order(stages):
    order = []
    for stage in stages:
        for field in stage:
            if field not in order:
                order.append(field)
    for stage in stages:
        for expr in stage.values():
            for name, kind, payload in expr.terms:
                read = ([payload[1]] if kind == _expr.STENCIL
                        else [f for f, _ in payload])
                for field in read:
                    if field not in order:
                        order.append(field)
    return tuple(order)


def _check_names(fields):
    seen = {}
    for f in fields:
        if f.name in seen:
            raise ValueError("two different fields are named %r; give each "
                             "field of a scheme its own name" % f.name)
        seen[f.name] = f


def _params_and_stencils(stages):
    params, stencils = [], []
    for stage in stages:
        for expr in stage.values():
            for name, kind, payload in expr.terms:
                if name is not None and name not in params:
                    params.append(name)
                if kind == _expr.STENCIL and payload[0] not in stencils:
                    stencils.append(payload[0])
    return tuple(params), tuple(stencils)


def _stencil_labels(stencils):
    labels, used = {}, collections.Counter()
    for s in stencils:
        used[_expr.stencil_label(s)] += 1
    count = collections.Counter()
    for s in stencils:
        base = _expr.stencil_label(s)
        if used[base] > 1:
            count[base] += 1
            base = "%s_%d" % (base, count[base])
        labels[s] = base
    return labels


def _expr_text(expr, labels):
    if not expr.terms:
        return "0"
    parts = []
    for key, coef in expr.terms.items():
        name, kind, payload = key
        if kind == _expr.STENCIL:
            body = "%s(%s)" % (labels[payload[0]], payload[1].name)
            if name is not None:
                body = "%s*%s" % (name, body)
        else:
            body = _expr.term_text(key)
        size = abs(coef)
        part = ("%r" % size if body == "1" else body if size == 1.0
                else "%r*%s" % (size, body))
        if not parts:
            parts.append(("-" if coef < 0 else "") + part)
        else:
            parts.append(("- " if coef < 0 else "+ ") + part)
    return " ".join(parts)
