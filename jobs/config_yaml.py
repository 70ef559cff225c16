"""YAML text → plain Python values plus the line of every key and item, with YAML alias bombs stopped.

The text is *composed* (not constructed) into a node tree with a safe loader, and the values are built
here, recording the start line of every mapping key and sequence item under its key path
(``("crawl", "delay")``, ``("questions", 2)``), so that a validation error can name its line. Building
the values ourselves is also where alias bombs are stopped: every node reached again through an alias
counts against a small budget.
"""

from __future__ import annotations

from typing import Any

import yaml

from jobs.config_messages import JobFileError, format_path, got, job_error

# Nodes that may be reached *again* through YAML aliases (*name). Sharing a list of URLs between
# a few questions costs hundreds; a "billion laughs" bomb needs billions and is cut off here.
MAX_ALIAS_NODES = 10_000
MAX_NESTING = 64  # deeper than any job needs; also keeps our recursive walk far from Python's limit

def _short_tag(tag: str) -> str:
    """``tag:yaml.org,2002:python/object`` → ``!!python/object``, as the user wrote it."""
    prefix = "tag:yaml.org,2002:"
    return "!!" + tag[len(prefix):] if tag.startswith(prefix) else tag


_MERGE_TAG = "tag:yaml.org,2002:merge"
_PLAIN_COLLECTION_TAGS = {"tag:yaml.org,2002:seq", "tag:yaml.org,2002:map"}


class _AliasNode(yaml.Node):
    """Where an alias (*name) was used, pointing at the anchored node.

    PyYAML's composer returns the anchored node itself for an alias, losing the alias's own
    position; keeping it lets errors inside expanded aliases name the line that used the alias.
    """

    id = "alias"

    def __init__(self, target: yaml.Node, start_mark: yaml.Mark, end_mark: yaml.Mark) -> None:
        super().__init__(target.tag, target.value, start_mark, end_mark)
        self.target = target


class _JobLoader(yaml.SafeLoader):
    """Safe loader used only to scan, parse and compose; values are built by :class:`_Builder`.

    The pure-Python loader (not CSafeLoader) on purpose: error texts and marks are the same on
    every machine, and job files are small.
    """

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            target = super().compose_node(parent, index)  # raises on an undefined alias
            return _AliasNode(target, event.start_mark, event.end_mark)
        return super().compose_node(parent, index)


class _Builder:
    """Turn a composed YAML node tree into plain values, remembering the line of every entry."""

    def __init__(self, loader: _JobLoader, source: str) -> None:
        self.loader = loader
        self.source = source
        self.lines: dict[tuple[str | int, ...], int] = {}
        self._active: set[int] = set()  # nodes on the current path (cycle detection)
        self._alias_depth = 0  # > 0 while building a node reached again (through an alias)
        self._alias_budget = MAX_ALIAS_NODES
        self._alias_entry: tuple[str | int, ...] = ()  # where the outermost alias was used

    def _error(self, node: yaml.Node, message: str, path: tuple[str | int, ...] = ()) -> JobFileError:
        line = self.lines.get(path) or node.start_mark.line + 1
        return job_error(self.source, message, line=line, key=format_path(path) or None)

    def build(self, node: yaml.Node, path: tuple[str | int, ...] = (), depth: int = 0) -> Any:
        if depth > MAX_NESTING:
            raise self._error(node, f"nested more than {MAX_NESTING} levels deep; a job file is much flatter", path)
        if isinstance(node, _AliasNode):
            # Everything reached through an alias is paid for from the budget, however often
            # the same anchored node is reached: that repetition is what a bomb multiplies.
            if not self._alias_depth:
                self._alias_entry = path
            self._alias_depth += 1
            try:
                return self.build(node.target, path, depth)
            finally:
                self._alias_depth -= 1
        key = id(node)
        if key in self._active:
            raise self._error(node, "recursive YAML alias (a value contains itself); remove the alias", path)
        if self._alias_depth:
            self._alias_budget -= 1
            if self._alias_budget < 0:
                # Reported where the alias was used: the anchor's own line says nothing.
                raise self._error(
                    node,
                    f"YAML aliases expand to more than {MAX_ALIAS_NODES} values; "
                    "use anchors (&) and aliases (*) only for small repeated parts",
                    self._alias_entry,
                )
        self._active.add(key)
        try:
            if isinstance(node, yaml.MappingNode):
                return self._mapping(node, path, depth)
            if isinstance(node, yaml.SequenceNode):
                self._plain_tag(node, path)
                items = []
                for index, child in enumerate(node.value):
                    self.lines[path + (index,)] = child.start_mark.line + 1
                    items.append(self.build(child, path + (index,), depth + 1))
                return items
            return self._scalar(node, path)
        finally:
            self._active.discard(key)

    def _plain_tag(self, node: yaml.Node, path: tuple[str | int, ...]) -> None:
        if node.tag not in _PLAIN_COLLECTION_TAGS:
            raise self._error(node, f"YAML tag {_short_tag(node.tag)} is not supported in job files; remove it", path)

    def _scalar(self, node: yaml.ScalarNode, path: tuple[str | int, ...]) -> Any:
        try:
            # SafeConstructor only knows the standard YAML types; any other tag is an error here.
            return self.loader.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            problem = exc.problem or "cannot read value"
            if "could not determine a constructor" in problem:
                problem = f"YAML tag {_short_tag(node.tag)} is not supported in job files; remove it"
            raise self._error(node, problem, path) from None
        except (ValueError, TypeError, OverflowError):
            # e.g. "!!float abc": the explicit tag promised a type the text is not.
            raise self._error(node, f"cannot read {got(node.value)} as {node.tag.rsplit(':', 1)[-1]}", path) from None

    def _mapping(self, node: yaml.MappingNode, path: tuple[str | int, ...], depth: int) -> dict[str, Any]:
        self._plain_tag(node, path)
        result: dict[str, Any] = {}
        explicit_lines: dict[str, int] = {}
        merged: list[dict[str, Any]] = []
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                # "<<: *defaults" — explicit keys win, then earlier merged mappings (YAML spec).
                sources = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
                for source in sources:
                    value = self.build(source, path, depth + 1)
                    if not isinstance(value, dict):
                        raise self._error(key_node, "'<<' can only merge mappings", path)
                    merged.append(value)
                continue
            if isinstance(key_node, _AliasNode):
                key_node = key_node.target  # "*k: value": the key is the anchored text
            if not isinstance(key_node, yaml.ScalarNode):
                raise self._error(key_node, "a key must be plain text, not a list or mapping", path)
            key = self._scalar(key_node, path)
            line = key_node.start_mark.line + 1
            if not isinstance(key, str):
                raise self._error(
                    key_node,
                    f"key {got(key)} is read as a {type(key).__name__}, not text; put it in quotes",
                    path,
                )
            if key in explicit_lines:
                child_path = format_path(path + (key,))
                raise job_error(
                    self.source,
                    f"duplicate key (first on line {explicit_lines[key]}); keep only one",
                    line=line,
                    key=child_path,
                )
            explicit_lines[key] = line
            self.lines[path + (key,)] = line
            result[key] = self.build(value_node, path + (key,), depth + 1)
        for extra in merged:
            for key, value in extra.items():
                result.setdefault(key, value)
        return result


_SYNTAX_HINTS = (
    ("mapping values are not allowed", "check the indentation, or quote a value that contains ': '"),
    ("cannot start any token", "indent with spaces, not tabs, and quote values starting with @ or `"),
    ("expected <block end>", "check the indentation of this line"),
    ("could not find expected ':'", "a key needs ': ' after it; quote text that is not a key"),
    ("found undefined alias", "define the anchor (&name) before using *name"),
    ("expected a single document", "a job file is one document; remove the extra '---'"),
    ("end of stream", "a quote or bracket is not closed"),
    ("did not find expected", "a quote or bracket is not closed, or the indentation is off"),
)


def _syntax_error(source: str, text: str, exc: yaml.YAMLError) -> JobFileError:
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, exc.position) + 1
        return job_error(
            source,
            f"YAML syntax error: unacceptable character #x{exc.character:04x}; remove control characters",
            line=line,
        )
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        problem = exc.problem or exc.context or "invalid YAML"
        message = f"YAML syntax error: {problem}"
        if exc.context_mark is not None and exc.context_mark.line != mark.line and exc.context:
            message += f" ({exc.context} on line {exc.context_mark.line + 1})"
        both = f"{problem} {exc.context or ''}"
        hint = next((h for needle, h in _SYNTAX_HINTS if needle in both), None)
        if hint:
            message += f"; {hint}"
        return job_error(source, message, line=mark.line + 1, column=mark.column + 1)
    return job_error(source, f"YAML syntax error: {exc}")


def compose(text: str, source: str) -> tuple[Any, dict[tuple[str | int, ...], int]]:
    """YAML text → (plain value, {key path: line})."""
    try:
        loader = _JobLoader(text)  # the reader already rejects control characters here
    except yaml.YAMLError as exc:
        raise _syntax_error(source, text, exc) from None
    try:
        try:
            node = loader.get_single_node()
        except yaml.YAMLError as exc:
            raise _syntax_error(source, text, exc) from None
        except RecursionError:
            # The composer is recursive: thousands of nested brackets exhaust the stack first.
            raise job_error(source, "YAML nested too deeply; a job file is much flatter") from None
        if node is None:
            raise job_error(source, "the job file is empty; start from configs/example.yaml")
        builder = _Builder(loader, source)
        builder.lines[()] = node.start_mark.line + 1
        return builder.build(node), builder.lines
    finally:
        loader.dispose()
