"""The shared distillation toolkit the methods and baselines build on.

* :mod:`~dpsd.distill.annotators`: the teacher's private answers (:class:`PrivateAnnotator`) and the
  data-sensitive release's event (:func:`output_gradient_release`);
* :mod:`~dpsd.distill.generator_losses`: DPSD Eq. (8)'s generator loss and Alg. 1 line 6's L_s term;
* :mod:`~dpsd.distill.builders`: the student and generator, and the optimisers;
* :mod:`~dpsd.distill.survival`: the share of Eq. (5)'s answers in which the teacher's class survived the top-k rule.
"""
