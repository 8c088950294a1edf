"""The lean runtime: loads engines, owns the paged caches and state slots, batches requests continuously."""
