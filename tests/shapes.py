"""Small workload specs shared by the tests."""

# Small shapes: each end-to-end session stays within seconds on 2 cores.
SMALL = {
    "conv_nhwc": {
        "name": "t-conv-nhwc",
        "op": "conv2d",
        "params": {
            "layout": "NHWC",
            "batch": 1,
            "in_channels": 16,
            "height": 14,
            "width": 14,
            "out_channels": 32,
            "kernel": 3,
            "stride": 1,
            "padding": 1,
        },
    },
    "conv_nchw": {
        "name": "t-conv-nchw",
        "op": "conv2d",
        "params": {
            "layout": "NCHW",
            "batch": 1,
            "in_channels": 16,
            "height": 14,
            "width": 14,
            "out_channels": 32,
            "kernel": 3,
            "stride": 1,
            "padding": 1,
        },
    },
    "depthwise": {
        "name": "t-dw",
        "op": "depthwise_conv2d",
        "params": {
            "layout": "NHWC",
            "batch": 1,
            "channels": 32,
            "height": 28,
            "width": 28,
            "kernel": 3,
            "stride": 1,
            "padding": 1,
        },
    },
    "matmul": {"name": "t-mm", "op": "matmul", "params": {"m": 64, "n": 64, "k": 64}},
}
