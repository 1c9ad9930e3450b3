"""A source connector whose task raises on its first poll: the worker marks it FAILED with its
trace and keeps running the others. Loaded through plugin.path."""
from connect.api import SourceConnector, SourceTask


class ExplodingSourceConnector(SourceConnector):
    def start(self, props):
        self.props = props

    def task_class(self):
        return ExplodingSourceTask

    def task_configs(self, max_tasks):
        return [dict(self.props)]


class ExplodingSourceTask(SourceTask):
    def start(self, props):
        pass

    def poll(self):
        raise RuntimeError("the source system is on fire")
