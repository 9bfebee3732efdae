"""Privacy operations that drive the methods: noise calibration (:mod:`~dpsd.privacy_ops.calibrate`),
the mechanism audit (:mod:`~dpsd.privacy_ops.audit`) and the model membership-inference audit
(:mod:`~dpsd.privacy_ops.model_audit`). They sit above the methods; the pure core they account with
is :mod:`dpsd.privacy`.
"""
