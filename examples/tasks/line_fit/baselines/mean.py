# title: Mean of the training y
# tags: baseline
# abstract: Predicts the mean training y for every x.
import csv


def predict():
    with open("data/train.csv") as f:
        ys = [float(row["y"]) for row in csv.DictReader(f)]
    with open("data/test_x.csv") as f:
        n = sum(1 for _ in csv.DictReader(f))
    return [sum(ys) / len(ys)] * n
