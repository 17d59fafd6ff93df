"""The built-in routing policies, one module each; :mod:`kvharness.routing.registry` names them."""
