"""Small schemas the sketch decoding, wording-rule and value-evidence tests share, and
`items_of`."""

from __future__ import annotations

from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table
from proxy.nl2sql.sketch import STAR, SelectItem, Slots

MUSIC = Schema(
    "music",
    (Table("singer"), Table("song"), Table("concert")),
    (
        Column(0, "singer_id", "number"),
        Column(0, "name"),
        Column(0, "net_worth", "number"),
        Column(1, "song_id", "number"),
        Column(1, "singer_id", "number"),
        Column(1, "title"),
        Column(2, "concert_id", "number"),
        Column(2, "year", "number"),
    ),
)
NAME, NET_WORTH, TITLE, YEAR = 1, 2, 5, 7
SINGER, SONG, CONCERT = 0, 1, 2


def items_of(*texts: str) -> frozenset[SelectItem]:
    """SelectItems of MUSIC from `agg:column` texts ("avg:2", ":1")."""
    return frozenset(
        SelectItem(aggregate, int(column))
        for aggregate, column in (text.split(":") for text in texts)
    )


CARS = Schema(
    "cars",
    (Table("cars"), Table("makers")),
    (
        Column(0, "id", "integer", primary_key=True),
        Column(0, "cylinders", "integer"),
        Column(0, "mpg", "real"),
        Column(0, "maker", "integer"),
        Column(1, "id", "integer", primary_key=True),
        Column(1, "name"),
    ),
    (ForeignKey(3, 4),),
)


BY_COUNT = frozenset({"group by", "order by", "desc", "limit"})
COUNTED = Slots(group_by=frozenset({5}), order_by=(SelectItem("count", STAR),), limit=1)


CAR_MODELS = Schema(
    "cars",
    (Table("model_list"), Table("car_names"), Table("cars_data")),
    (
        Column(0, "model_id", "integer", primary_key=True),
        Column(0, "model"),
        Column(1, "make_id", "integer", primary_key=True),
        Column(1, "model"),
        Column(2, "id", "integer", primary_key=True),
        Column(2, "horsepower", "integer"),
    ),
    (ForeignKey(column=3, referenced=1), ForeignKey(column=4, referenced=2)),
)


CITIES = Schema(
    "world",
    (Table("city"), Table("country")),
    (
        Column(0, "countrycode"),
        Column(0, "population", "integer"),
        Column(1, "code", primary_key=True),
        Column(1, "population", "integer"),
        Column(1, "gnp", "real"),
    ),
    (ForeignKey(column=0, referenced=2),),
)

# country(code, name, continent, population), city(name, district, countrycode, population),
# countrylanguage(countrycode, language)
WORLD = Schema(
    "world",
    (Table("country"), Table("city"), Table("countrylanguage")),
    (
        Column(0, "code", primary_key=True),  # 0
        Column(0, "name"),  # 1
        Column(0, "continent"),  # 2
        Column(0, "population", type="integer"),  # 3
        Column(1, "name"),  # 4
        Column(1, "district"),  # 5
        Column(1, "countrycode"),  # 6
        Column(1, "population", type="integer"),  # 7
        Column(2, "countrycode"),  # 8
        Column(2, "language"),  # 9
    ),
    (ForeignKey(6, 0), ForeignKey(8, 0)),
)
