"""WattGPU export: XGBoost → ONNX with a parity gate, feature schema and hashes."""
