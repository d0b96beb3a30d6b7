"""A minimal Django project that hands work to corral (docs/frameworks.md)."""

import os

SECRET_KEY = "example-only"
DEBUG = False
ALLOWED_HOSTS = ["localhost", "testserver"]
ROOT_URLCONF = "shop.urls"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "corral.django",  # python manage.py corral_worker
    "orders",
]

# An in-memory database shared by the process's threads (the worker runs plain functions in
# threads), so that the example needs no file; SHOP_DATABASE names a file instead.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("SHOP_DATABASE", "file:shop?mode=memory&cache=shared"),
    }
}

#: The queue of order confirmations.
ORDERS_QUEUE = os.environ.get("ORDERS_QUEUE", "orders")

CORRAL = {
    "url": None,  # None: CORRAL_REDIS_URL, else the embedded server
    "queues": {ORDERS_QUEUE: "orders.jobs:confirm_order"},
}
