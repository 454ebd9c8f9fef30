"""From engine samples to windows, one direction:

- counts: a model's counter deltas and their arithmetic, per declared counter kind;
- intervals: the deltas between two consecutive scrapes, restarts detected;
- windows: sums of intervals (the sliding window of the live gauges, the aligned history
  windows);
- packing: the sliding window's compact, garbage-collector-friendly memory layout.
"""
