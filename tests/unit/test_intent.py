"""Requests to change data or the server are told apart from questions
(`proxy.nl2sql.intent.write_request`)."""

from __future__ import annotations

import pytest

from proxy.nl2sql.intent import write_request

WRITES = [
    ("delete all orders", "delete data"),
    ("Delete every student from Boston.", "delete data"),
    ("please remove the courses with no enrollments", "delete data"),
    ("can you please wipe the enrollments table", "delete data"),
    ("truncate flights", "delete data"),
    ("drop the students table", "drop a database object"),
    ("DROP TABLE students", "drop a database object"),
    ("update the budget of the physics department to 5000", "change data"),
    ("set every grade to A", "change data"),
    ("change the city of student 3 to Paris", "change data"),
    ("rename the column title to name", "change the schema"),
    ("increase all salaries by 10%", "change data"),
    ("insert a new course called Databases", "add data"),
    ("add a student named Ann Lee", "add data"),
    ("create a table of backups", "create a database object"),
    ("alter table students add column age int", "change the schema"),
    ("grant select on students to public", "change privileges"),
    ("revoke all privileges from bob", "change privileges"),
    ("terminate every other connection", "administer the server"),
    ("kill all idle sessions", "administer the server"),
    ("shut down the server", "administer the server"),
    ("I want you to delete the old orders", "delete data"),
    ("I'd like to drop the enrollments table", "drop a database object"),
    ("let's vacuum the database", "administer the server"),
    ("could you cancel the running queries", "administer the server"),
]

READS = [
    "how many orders were deleted last month?",
    "which students dropped a course?",
    "show the orders that were updated after 2020",
    "add up the budgets of all departments",
    "change in enrollment between 2020 and 2021",
    "set of courses taught by Smith",
    "lower than 5 credits: which courses?",
    "list the drop-off locations",
    "what is the update frequency of each feed?",
    "count the students removed from the honour roll",
    "who created the most orders?",
    "empty rooms in building A",
    "Find the name of the department that has the largest budget.",
    "the kill ratio of each player",
]


@pytest.mark.parametrize(("request_text", "what"), WRITES)
def test_a_request_to_change_data_or_the_server_is_told(request_text: str, what: str) -> None:
    assert write_request(request_text) == what


@pytest.mark.parametrize("question", READS)
def test_a_question_is_not_a_request(question: str) -> None:
    assert write_request(question) is None
