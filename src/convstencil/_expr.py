"""The algebra of schemes: fields, parameter fields, and the expressions
a scheme's updates are written in.

An expression is kept expanded, as a sum of terms, each a coefficient (a
number, times at most one parameter field) times either

- a stencil correlated with one field (``L(u)``), or
- a monomial of the fields at the point (``u * v**2``; the empty one is
  1, so ``c`` alone, a parameter field, is a source term).

Arithmetic expands as it goes (``(u + v)**2`` is three terms), like terms
are merged, and anything that does not expand into such terms -- a field
in a denominator, a product of two stencil terms or of a stencil term and
a field, a power above 4, a product of two parameter fields, a stencil of
a product -- raises TypeError or ValueError naming the part.  Terms keep
the order in which they first appear: it is the order in which the
engines sum them (csrc/scheme.h).
"""
import itertools
import numbers
import re

MAX_POWER = 4
_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*\Z")
_serial = itertools.count()


def _check_name(name, what):
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError("%s names must be identifiers such as 'u' or "
                         "'c0', got %r" % (what, name))
    return name


def _number(value):
    """`value` as a float if it is a real number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError("a scheme's numbers must be finite, got %r"
                         % value)
    return value


class _Algebra:
    """Arithmetic shared by fields, parameter fields and expressions."""

    __slots__ = ()

    def __add__(self, other):
        return _sum(self, other, 1.0)

    def __radd__(self, other):
        return _sum(other, self, 1.0)

    def __sub__(self, other):
        return _sum(self, other, -1.0)

    def __rsub__(self, other):
        return _sum(other, self, -1.0)

    def __neg__(self):
        return as_expr(self).scaled(-1.0)

    def __pos__(self):
        return as_expr(self)

    def __mul__(self, other):
        return _product(self, other)

    def __rmul__(self, other):
        return _product(other, self)

    def __truediv__(self, other):
        number = _number(other)
        if number is None:
            raise TypeError("a scheme cannot divide by %s: a field or "
                            "parameter in a denominator does not expand "
                            "into terms (pass 1/c as a parameter field "
                            "instead)" % _describe(other))
        if number == 0.0:
            raise ZeroDivisionError("division of a scheme expression by 0")
        return as_expr(self).scaled(1.0 / number)

    def __rtruediv__(self, other):
        raise TypeError("%s / %s: a field or parameter in a denominator "
                        "does not expand into a scheme's terms (pass the "
                        "reciprocal as a parameter field instead)"
                        % (_describe(other), _describe(self)))

    def __pow__(self, power):
        if isinstance(power, bool) or not isinstance(power, numbers.Integral):
            raise TypeError("a scheme's powers must be integers 0 to %d, "
                            "got %r in (%s)**%r"
                            % (MAX_POWER, power, self, power))
        power = int(power)
        if power < 0:
            raise TypeError("(%s)**%d: a negative power puts a field in a "
                            "denominator, which does not expand into a "
                            "scheme's terms" % (self, power))
        if power > MAX_POWER:
            raise ValueError("(%s)**%d: powers above %d are not supported"
                             % (self, power, MAX_POWER))
        result = Expr({_ONE: 1.0})
        for _ in range(power):
            result = _product(result, self)
        return result

    def __rpow__(self, base):
        raise TypeError("%s ** (%s): a field in an exponent does not expand "
                        "into a scheme's terms" % (_describe(base), self))

    def __bool__(self):
        raise TypeError("a scheme expression has no truth value (did you "
                        "compare fields?)")


class Field(_Algebra):
    """A field a scheme advances (``u, v = convstencil.fields("u v")``).

    Fields are told apart by identity, not by name: two fields made with
    the same name are two fields."""

    __slots__ = ("name", "_serial")

    def __init__(self, name):
        self.name = _check_name(name, "field")
        self._serial = next(_serial)

    def __repr__(self):
        return self.name

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


class Param(_Algebra):
    """A parameter field: an array of the grid's shape that a scheme reads
    and never updates (a velocity, a conductivity, a source), given to
    apply() by name: ``params={"c": c0}``."""

    __slots__ = ("name",)

    def __init__(self, name):
        self.name = _check_name(name, "parameter")

    def __repr__(self):
        return self.name

    def __hash__(self):
        return hash(("param", self.name))

    def __eq__(self, other):
        return isinstance(other, Param) and other.name == self.name


def fields(names):
    """Fields for a scheme: ``u, v = fields("u v")`` (names separated by
    spaces or commas); one name gives one Field."""
    if not isinstance(names, str):
        raise TypeError("fields() takes names in one string, such as "
                        "'u v', got %s" % type(names).__name__)
    parts = [p for p in re.split(r"[\s,]+", names.strip()) if p]
    if not parts:
        raise ValueError("fields() needs at least one name, got %r" % names)
    made = tuple(Field(p) for p in parts)
    return made[0] if len(made) == 1 else made


def param(name):
    """A parameter field named `name` (its array is given to apply() as
    ``params={name: array}``)."""
    return Param(name)


# A term's key: (parameter name or None, kind, payload).  A monomial's
# payload is a tuple of (field, power) sorted by the fields' creation; a
# stencil term's is (stencil, field).
MONOMIAL, STENCIL = "monomial", "stencil"
_ONE = (None, MONOMIAL, ())


def _field_key(field):
    return field._serial


class Expr(_Algebra):
    """An expanded sum of terms (see the module's docstring).  `terms`
    maps each term's key to its coefficient, in order of appearance."""

    __slots__ = ("terms",)

    def __init__(self, terms):
        self.terms = {k: c for k, c in terms.items() if c != 0.0}

    def scaled(self, factor):
        return Expr({k: c * factor for k, c in self.terms.items()})

    def __repr__(self):
        if not self.terms:
            return "0"
        text = ""
        for key, coef in self.terms.items():
            body = term_text(key)
            sign = "-" if coef < 0 else "+"
            size = abs(coef)
            if body == "1":
                part = "%r" % size
            elif size == 1.0:
                part = body
            else:
                part = "%r*%s" % (size, body)
            text += ("-" + part if sign == "-" else part) if not text else (
                " %s %s" % (sign, part))
        return text


def term_text(key):
    """A term's factors as text (without its number): 'c*L0(u)', 'u*v**2'."""
    name, kind, payload = key
    if kind == STENCIL:
        stencil, field = payload
        body = "%s(%s)" % (stencil_label(stencil), field.name)
    else:
        body = "*".join(f.name if p == 1 else "%s**%d" % (f.name, p)
                        for f, p in payload) or "1"
    if name is None:
        return body
    return name if body == "1" else "%s*%s" % (name, body)


def stencil_label(stencil):
    return stencil.name if stencil.name else "S%s" % "x".join(
        map(str, stencil.shape))


def stencil_term(stencil, operand):
    """``stencil(operand)``: one stencil term per field of a linear
    combination of fields (with numbers as coefficients)."""
    expr = as_expr(operand)
    if not expr.terms:
        raise TypeError("a stencil needs a field, got 0")
    out = {}
    for (name, kind, payload), coef in expr.terms.items():
        if kind != MONOMIAL or name is not None or len(payload) != 1 or (
                payload[0][1] != 1):
            raise TypeError("a stencil applies to one field (or a sum of "
                            "fields times numbers), got %s(%s): the term "
                            "%s is not a field" % (
                                stencil_label(stencil), expr,
                                term_text((name, kind, payload))))
        key = (None, STENCIL, (stencil, payload[0][0]))
        out[key] = out.get(key, 0.0) + coef
    return Expr(out)


def as_expr(value):
    """A Field, Param, Expr or number as an Expr."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, Field):
        return Expr({(None, MONOMIAL, ((value, 1),)): 1.0})
    if isinstance(value, Param):
        return Expr({(value.name, MONOMIAL, ()): 1.0})
    number = _number(value)
    if number is None:
        raise TypeError("a scheme's expressions are made of fields, "
                        "parameter fields (convstencil.param), stencils "
                        "applied to fields and numbers; got %s"
                        % _describe(value))
    return Expr({_ONE: number})


def _describe(value):
    if isinstance(value, (Field, Param, Expr)):
        return repr(value)
    return "%s %r" % (type(value).__name__, value)


def _sum(a, b, sign):
    out = dict(as_expr(a).terms)
    for key, coef in as_expr(b).terms.items():
        out[key] = out.get(key, 0.0) + sign * coef
    return Expr(out)


def _product(a, b):
    ea, eb = as_expr(a), as_expr(b)
    out = {}
    for ka, ca in ea.terms.items():
        for kb, cb in eb.terms.items():
            key = _key_product(ka, kb)
            out[key] = out.get(key, 0.0) + ca * cb
    return Expr(out)


def _key_product(ka, kb):
    (na, kind_a, pa), (nb, kind_b, pb) = ka, kb
    if na is not None and nb is not None:
        raise TypeError("%s * %s: a term may hold one parameter field; "
                        "multiply them yourself and pass the product as "
                        "one (params={'%s%s': ...})"
                        % (term_text(ka), term_text(kb), na, nb))
    name = na if na is not None else nb
    if kind_a == STENCIL or kind_b == STENCIL:
        stencil_side, other = (ka, kb) if kind_a == STENCIL else (kb, ka)
        if other[1] == STENCIL:
            raise TypeError("%s * %s: a product of two stencil terms is not "
                            "a term a scheme runs"
                            % (term_text(ka), term_text(kb)))
        if other[2]:
            raise TypeError("%s * %s: a stencil term times a field is not a "
                            "term a scheme runs (a stencil term's "
                            "coefficient is a number or a parameter field)"
                            % (term_text(ka), term_text(kb)))
        return (name, STENCIL, stencil_side[2])
    powers = dict(pa)
    for f, p in pb:
        powers[f] = powers.get(f, 0) + p
        if powers[f] > MAX_POWER:
            raise ValueError("%s * %s: %s to the power %d; powers above %d "
                             "are not supported"
                             % (term_text(ka), term_text(kb), f.name,
                                powers[f], MAX_POWER))
    return (name, MONOMIAL, tuple(sorted(powers.items(),
                                      key=lambda fp: _field_key(fp[0]))))
