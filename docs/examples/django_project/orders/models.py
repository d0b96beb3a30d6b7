from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    quantity = models.IntegerField()
    status = models.CharField(max_length=20, default="new")

    class Meta:
        app_label = "orders"
