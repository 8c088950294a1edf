import json

import pytest

from dayzero.perf.op_kinds import ELEMENTWISE, GEMM, KDA, MOE_EXPERTS, REDUCTIONS, SAMPLING
from dayzero.perf.step_trace import MODEL, STEP, TraceEvent, kind_times, read_trace


def _range(name, start, duration, thread=1):
    return TraceEvent(name, "user_annotation", start, duration, thread)


def _launch(start, correlation, name="cudaLaunchKernel", category="cuda_runtime"):
    return TraceEvent(name, category, start, 2.0, 1, correlation)


def _kernel(name, start, duration, correlation):
    return TraceEvent(name, "kernel", start, duration, 7, correlation)


def test_device_work_is_split_by_kind_and_by_whether_the_model_launched_it():
    events = [
        _range(STEP, 0, 100), _range(MODEL, 10, 30), _range(STEP, 100, 100), _range(MODEL, 110, 30),
        # a graph launch in each step's forward, its kernels run back to back
        _launch(12, 1, "cudaGraphLaunch"), _kernel("_fused_kda_decode_kernel", 20, 10, 1),
        _kernel("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 30, 15, 1), _kernel("_grouped_gemm_kernel", 45, 20, 1),
        _launch(112, 2, "cudaGraphLaunch"), _kernel("_fused_kda_decode_kernel", 120, 10, 2),
        _kernel("nvjet_tst_64x8_64x16_4x1_v_bz_TNT", 130, 15, 2), _kernel("_grouped_gemm_kernel", 145, 20, 2),
        # an argmax after the forward; a reduction in it, launched through the driver API
        _launch(50, 3), _kernel("void at::native::reduce_kernel<512, 1>", 70, 5, 3),
        _launch(135, 4, "cuLaunchKernelEx", "cuda_driver"), _kernel("void at::native::reduce_kernel<512>", 170, 5, 4),
        # an input copy overlapping a kernel counts once
        _launch(105, 5, "cudaMemcpyAsync"), TraceEvent("Memcpy HtoD (Pageable -> Device)", "gpu_memcpy", 160, 10, 8, 5),
        # the ranges' copies on the device's timeline are no steps
        TraceEvent(STEP, "gpu_user_annotation", 20, 150, 7), TraceEvent(MODEL, "gpu_user_annotation", 20, 45, 7),
        # device work launched before the profiled steps is left out
        _launch(-20, 6), _kernel("void at::native::vectorized_elementwise_kernel<4>", -10, 15, 6),
    ]
    times = kind_times(events)
    # the device's timeline: from the first kernel the steps launched to the last one's end
    assert times.on_device and times.steps == 2 and times.window_us == 175 - 20
    assert times.us == pytest.approx({KDA: 20, GEMM: 30, MOE_EXPERTS: 40, REDUCTIONS: 5, SAMPLING: 5 + 5})
    assert times.launches == {KDA: 2, GEMM: 2, MOE_EXPERTS: 2, SAMPLING: 2, REDUCTIONS: 1}
    assert times.busy_us <= times.window_us


def test_idle_time_between_one_forwards_kernels_is_the_models_gaps_the_rest_host_gaps():
    events = [
        _range(STEP, 0, 100), _range(MODEL, 5, 10), _range(STEP, 100, 100), _range(MODEL, 105, 10),
        # step 1: a graph's kernels with 3 and 4 us between them, then the argmax 10 us later
        _launch(6, 1, "cudaGraphLaunch"), _kernel("_fused_kda_decode_kernel", 20, 10, 1),
        _kernel("nvjet_tst_64x8", 33, 10, 1), _kernel("_grouped_gemm_kernel", 47, 10, 1),
        _launch(16, 2), _kernel("void at::native::reduce_kernel<512>", 67, 5, 2),
        # step 2: the next forward's graph starts after a host gap; 2 us between its kernels
        _launch(106, 3, "cudaGraphLaunch"), _kernel("_fused_kda_decode_kernel", 130, 10, 3),
        _kernel("nvjet_tst_64x8", 142, 10, 3),
    ]
    times = kind_times(events)
    assert times.model_gap_us == pytest.approx(3 + 4 + 2)
    assert times.busy_us == pytest.approx(30 + 5 + 20)
    assert times.by_name == {"_fused_kda_decode_kernel": (2, pytest.approx(20)),
                             "nvjet_tst_64x8": (2, pytest.approx(20)), "_grouped_gemm_kernel": (1, pytest.approx(10)),
                             "void at::native::reduce_kernel<512>": (1, pytest.approx(5))}


def test_device_work_whose_launch_is_lost_counts_as_the_models():
    events = [_range(STEP, 0, 50), _kernel("void at::native::reduce_kernel<512, 1>", 10, 5, 99),
              _kernel("_fused_kda_decode_kernel", 30, 30, None)]
    times = kind_times(events)
    assert times.us == pytest.approx({REDUCTIONS: 5, KDA: 30})
    # no forward range: a step a step range
    assert times.window_us == 60 - 10 and times.steps == 1


def test_without_forward_ranges_each_step_range_is_a_step():
    events = [_range(STEP, 0, 50), _range(STEP, 50, 50), _launch(5, 1), _kernel("_fused_kda_decode_kernel", 10, 20, 1),
              _launch(55, 2), _kernel("_fused_kda_decode_kernel", 60, 20, 2)]
    assert kind_times(events).steps == 2


def test_with_overlap_the_window_is_the_devices_over_the_forwards_the_steps_launched():
    events = [
        _range(STEP, 0, 100), _range(MODEL, 5, 10), _range(STEP, 100, 100), _range(MODEL, 105, 10),
        # the forward launched before the profiled steps still runs when the first one starts
        _launch(-50, 1, "cudaGraphLaunch"), _kernel("_grouped_gemm_kernel", 0, 60, 1),
        # each step's forward runs right after the one before: the device never waits for the host
        _launch(6, 2, "cudaGraphLaunch"), _kernel("_grouped_gemm_kernel", 60, 30, 2),
        _launch(106, 3, "cudaGraphLaunch"), _kernel("_grouped_gemm_kernel", 90, 30, 3),
        _launch(116, 4), _kernel("void at::native::reduce_kernel<512>", 120, 5, 4),
    ]
    times = kind_times(events)
    assert times.steps == 2 and times.window_us == 125 - 60
    assert times.busy_us == pytest.approx(times.window_us) and times.model_gap_us == 0


def test_host_ops_count_outermost_only_on_the_steps_thread():
    events = [
        _range(STEP, 0, 100), _range(MODEL, 0, 60),
        TraceEvent("dayzero::fused_kda_decode", "cpu_op", 5, 20, 1), TraceEvent("aten::mul", "cpu_op", 6, 5, 1),
        TraceEvent("aten::linear", "cpu_op", 30, 10, 1), TraceEvent("aten::mm", "cpu_op", 31, 8, 1),
        TraceEvent("aten::add", "cpu_op", 45, 5, 1),
        TraceEvent("aten::argmax", "cpu_op", 70, 4, 1), TraceEvent("aten::mm", "cpu_op", 80, 50, 2),
    ]
    times = kind_times(events)
    assert not times.on_device
    assert times.us == pytest.approx({KDA: 20, GEMM: 10, ELEMENTWISE: 5, SAMPLING: 4})
    assert times.launches == {KDA: 1, GEMM: 1, ELEMENTWISE: 1, SAMPLING: 1}


def test_a_trace_without_steps_is_refused():
    with pytest.raises(ValueError, match="no profiled decode step"):
        kind_times([TraceEvent("aten::mm", "cpu_op", 0, 1, 1)])


def test_chrome_traces_are_read_with_their_correlations(tmp_path):
    trace = tmp_path / "trace.json"
    trace.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 5.5, "dur": 2, "tid": 7, "args": {"correlation": 3}},
        {"ph": "X", "cat": "user_annotation", "name": STEP, "ts": 1, "dur": 10, "tid": 1},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
    ]}))
    assert read_trace(trace) == [TraceEvent("k", "kernel", 5.5, 2.0, 7, 3), TraceEvent(STEP, "user_annotation", 1.0,
                                                                                      10.0, 1, None)]
