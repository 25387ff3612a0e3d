import sys

from bert_ds.data.prepare.command import main

sys.exit(main())
