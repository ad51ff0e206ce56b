"""`gpulease recommend`: demand profiles sized from the GPU utilization the reaper reads."""
