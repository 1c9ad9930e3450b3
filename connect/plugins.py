"""Finding plug-ins by name: Kafka's class names, their aliases, or a Python dotted path.

    connector.class=org.apache.kafka.connect.file.FileStreamSourceConnector   (Kafka's name)
    connector.class=FileStreamSource                                           (alias)
    connector.class=mypackage.connectors.MySourceConnector                     (Python)

`plugin.path` is a comma-separated list of directories added to Python's import path;
the modules found directly in them are scanned for connectors for GET /connector-plugins.
Aliases as Connect computes them (PluginUtils): the simple class name, and that name
without its `Connector` suffix.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys

from connect import converters, file, transforms
from connect.api import Connector, SinkConnector, SourceConnector

BUILTIN_CONNECTORS = {
    "org.apache.kafka.connect.file.FileStreamSourceConnector": file.FileStreamSourceConnector,
    "org.apache.kafka.connect.file.FileStreamSinkConnector": file.FileStreamSinkConnector,
}
CONVERTERS = {
    "org.apache.kafka.connect.storage.StringConverter": converters.StringConverter,
    "org.apache.kafka.connect.json.JsonConverter": converters.JsonConverter,
    "org.apache.kafka.connect.converters.ByteArrayConverter": converters.ByteArrayConverter,
}


class PluginNotFound(LookupError):
    pass


class Plugins:
    def __init__(self, plugin_path: str = "") -> None:
        self.connectors = dict(BUILTIN_CONNECTORS)
        for directory in (d.strip() for d in plugin_path.split(",") if d.strip()):
            if directory not in sys.path:
                sys.path.insert(0, directory)
            for module_info in pkgutil.iter_modules([directory]):
                module = importlib.import_module(module_info.name)
                for _, cls in inspect.getmembers(module, inspect.isclass):
                    if issubclass(cls, (SourceConnector, SinkConnector)) and cls.__module__ == module.__name__:
                        self.connectors[f"{cls.__module__}.{cls.__qualname__}"] = cls
        self.aliases: dict[str, str] = {}
        for name, cls in self.connectors.items():
            simple = cls.__name__
            for alias in {simple, simple.removesuffix("Connector")}:
                # an alias two plug-ins share is ambiguous and dropped
                self.aliases[alias] = name if self.aliases.get(alias, name) == name else ""

    def connector_class(self, name: str) -> type[Connector]:
        name = self.aliases.get(name) or name
        return self.connectors.get(name) or _import_class(name, Connector)

    def connector_plugins(self) -> list[dict]:
        return [{"class": name, "type": cls.TYPE, "version": cls.version()}
                for name, cls in sorted(self.connectors.items())]

    @staticmethod
    def converter(name: str):
        return (CONVERTERS.get(name) or _import_class(name, converters.Converter))()

    @staticmethod
    def transformation(name: str):
        return (transforms.TRANSFORMS.get(name) or _import_class(name, transforms.Transformation))()

    @staticmethod
    def predicate(name: str):
        return (transforms.PREDICATES.get(name) or _import_class(name, transforms.Predicate))()


def _import_class(dotted: str, base: type) -> type:
    module_name, _, attribute = dotted.replace(":", ".").rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError):
        raise PluginNotFound(f"Failed to find any class that implements {base.__name__} and which name "
                             f"matches {dotted}") from None
    if not (inspect.isclass(cls) and issubclass(cls, base)):
        raise PluginNotFound(f"{dotted} is not a {base.__name__}")
    return cls
