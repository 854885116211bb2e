"""A small schema of singers, songs and concerts for the pipeline's stage tests."""

from __future__ import annotations

from dataclasses import replace

from proxy.nl2sql.schema import Column, ForeignKey, Schema, Table

MUSIC = Schema(
    "music",
    (Table("singer"), Table("song"), Table("concert")),
    (
        Column(0, "singer_id", "number"),
        Column(0, "name"),
        Column(1, "song_id", "number"),
        Column(1, "singer_id", "number"),
        Column(1, "title"),
        Column(2, "concert_id", "number"),
        Column(2, "year", "number"),
    ),
)
TITLE, YEAR = 4, 6
SINGER, SONG, CONCERT = 0, 1, 2


# MUSIC with song.singer_id -> singer.singer_id declared, and singer's key a primary key
KEYED = Schema(
    "music",
    MUSIC.tables,
    tuple(
        replace(c, primary_key=c.name == f"{MUSIC.tables[c.table].name}_id") for c in MUSIC.columns
    ),
    (ForeignKey(3, 0),),
)
NAME, SINGER_ID = 1, 0
