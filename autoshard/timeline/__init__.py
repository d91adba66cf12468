"""A planned step as a timeline: what runs when on the compute stream and on each mesh axis,
laid out from a plan's records alone (:func:`step_timeline`), and written as a Chrome trace
that Perfetto and chrome://tracing open (:func:`write_trace`), to set beside a profiler trace
of the real run."""

from autoshard.timeline.chrome import chrome_trace, trace_events, trace_json, write_trace
from autoshard.timeline.schedule import TRACE_FORMAT, step_timeline
from autoshard.timeline.slices import Category, Slice, Timeline, Track

__all__ = ["TRACE_FORMAT", "Category", "Slice", "Timeline", "Track", "chrome_trace",
           "step_timeline", "trace_events", "trace_json", "write_trace"]
