"""Router guest image and router profiles.

* :mod:`routers.profiles` - the registry of router profiles (``frr``, ``bird``, ``xorp``).
* :mod:`routers.build` - builds ``<cache>/guest/<profile>/{vmlinuz,initrd.img,manifest.json}``
  from Debian packages (``python -m routers build``); :data:`routers.build.HOST_PACKAGES` lists
  the Debian packages the build needs on the host.
* :mod:`routers.guest` - what the orchestrator uses: :func:`routers.guest.guest_image`,
  :func:`routers.guest.kernel_cmdline`, :data:`routers.guest.READY_MARKER`.

This package (and :mod:`routers.build` in particular) imports only the standard library, so the
Makefile can read ``HOST_PACKAGES`` with the system ``python3`` before the venv exists.
"""

from routers.errors import BuildError, NotBuiltError, ProfileUnavailableError, RouterError, UnknownProfileError

__all__ = ["BuildError", "NotBuiltError", "ProfileUnavailableError", "RouterError", "UnknownProfileError"]
