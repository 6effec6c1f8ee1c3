"""The knowledge engine: consolidate, query, refine, evaluate and reflect.

Pure parts (terms, routing, OKF rendering, the extractive writer, drift and distillation
rules) import no storage; the verbs in :mod:`memdir.engine.verbs` tie them to the store.
"""
