"""Calibrate the emulator from a real engine, predict it, and check the prediction."""
