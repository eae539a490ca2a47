"""``python -m crosstraffic.bench``: the veth-pair benchmark (:mod:`crosstraffic.bench.veth`)."""

import sys

from crosstraffic.bench.veth import main

sys.exit(main())
