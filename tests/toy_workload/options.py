"""The toy workload's config keys, declared once."""
from jobs.config_schema import Int, Str

OPTIONS = {"name": Str(default="toy", help="the workload"),
           "widget_size": Int(min=1, default=1, column=True, help="widgets' size"),
           "scaling": Str(choices=("weak", "strong"), default="weak", column=True, help="as inference")}
