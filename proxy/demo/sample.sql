-- The demo's sample database: a small university, with real relationships (every id a foreign
-- key) and text values worth asking about. Deterministic: the same rows on every load.

CREATE TABLE departments (
    id        integer PRIMARY KEY,
    name      text NOT NULL UNIQUE,
    building  text NOT NULL,
    budget    numeric(12, 2) NOT NULL
);
COMMENT ON TABLE departments IS 'Academic departments of the university';

CREATE TABLE instructors (
    id             integer PRIMARY KEY,
    first_name     text NOT NULL,
    last_name      text NOT NULL,
    title          text NOT NULL,
    department_id  integer NOT NULL REFERENCES departments (id),
    hired_on       date NOT NULL
);

CREATE TABLE courses (
    id             integer PRIMARY KEY,
    code           text NOT NULL UNIQUE,
    title          text NOT NULL,
    credits        integer NOT NULL,
    department_id  integer NOT NULL REFERENCES departments (id),
    instructor_id  integer NOT NULL REFERENCES instructors (id)
);

CREATE TABLE students (
    id             integer PRIMARY KEY,
    first_name     text NOT NULL,
    last_name      text NOT NULL,
    home_city      text NOT NULL,
    home_state     text NOT NULL,
    enrolled_year  integer NOT NULL,
    major_id       integer REFERENCES departments (id)
);
COMMENT ON COLUMN students.home_state IS 'US state, full name';

CREATE TABLE enrollments (
    student_id  integer NOT NULL REFERENCES students (id),
    course_id   integer NOT NULL REFERENCES courses (id),
    semester    text NOT NULL,
    score       numeric(5, 1) NOT NULL CHECK (score BETWEEN 0 AND 100),
    grade       text NOT NULL,
    PRIMARY KEY (student_id, course_id, semester)
);

INSERT INTO departments VALUES
    (1, 'Computer Science', 'Gates Hall', 1250000),
    (2, 'Mathematics', 'Euler Building', 830000),
    (3, 'History', 'Archive House', 410000),
    (4, 'Biology', 'Darwin Labs', 990000),
    (5, 'Music', 'Conservatory', 360000),
    (6, 'Economics', 'Keynes Hall', 720000);

INSERT INTO instructors VALUES
    (1, 'Ada', 'Lovelace', 'Professor', 1, '2009-09-01'),
    (2, 'Alan', 'Turing', 'Associate Professor', 1, '2014-01-15'),
    (3, 'Emmy', 'Noether', 'Professor', 2, '2005-09-01'),
    (4, 'Srinivasa', 'Ramanujan', 'Lecturer', 2, '2019-09-01'),
    (5, 'Mary', 'Beard', 'Professor', 3, '2001-09-01'),
    (6, 'Rosalind', 'Franklin', 'Associate Professor', 4, '2012-02-01'),
    (7, 'Gregor', 'Mendel', 'Lecturer', 4, '2020-09-01'),
    (8, 'Clara', 'Schumann', 'Professor', 5, '2008-09-01'),
    (9, 'Elinor', 'Ostrom', 'Professor', 6, '2003-09-01'),
    (10, 'Amartya', 'Sen', 'Associate Professor', 6, '2016-09-01');

INSERT INTO courses VALUES
    (1, 'CS101', 'Introduction to Programming', 4, 1, 2),
    (2, 'CS220', 'Databases', 4, 1, 1),
    (3, 'CS340', 'Machine Learning', 3, 1, 2),
    (4, 'MA101', 'Calculus I', 4, 2, 4),
    (5, 'MA230', 'Abstract Algebra', 3, 2, 3),
    (6, 'HI110', 'Ancient Rome', 3, 3, 5),
    (7, 'HI250', 'History of Science', 3, 3, 5),
    (8, 'BI101', 'Cell Biology', 4, 4, 6),
    (9, 'BI210', 'Genetics', 4, 4, 7),
    (10, 'MU120', 'Music Theory', 2, 5, 8),
    (11, 'EC101', 'Principles of Economics', 3, 6, 10),
    (12, 'EC310', 'Governing the Commons', 3, 6, 9);

-- 240 students: first and last names, cities and states cycled with co-prime strides so that
-- every combination differs; student 1 is Timmy Ward.
INSERT INTO students
SELECT i,
       (ARRAY['Timmy','Olivia','Liam','Emma','Noah','Ava','Mateo','Sofia','Lucas','Mia',
              'Ethan','Isabella','Aiden','Chloe','Kai','Zoe','Omar','Priya','Hiro','Amara',
              'Diego','Leila','Finn','Nadia'])[1 + (i - 1) % 24],
       (ARRAY['Ward','Garcia','Smith','Johnson','Okafor','Nguyen','Kowalski','Rossi','Haddad',
              'Tanaka','Murphy','Schmidt','Silva','Kim','Patel','Dubois','Jensen','Ivanova',
              'Cohen'])[1 + ((i - 1) * 7) % 19],
       (ARRAY['Honolulu','New York','Austin','Portland','Chicago','Boston','Denver','Seattle',
              'Miami','Phoenix','Nashville','Madison','Santa Fe'])[1 + ((i - 1) * 5) % 13],
       (ARRAY['Hawaii','New York','Texas','Oregon','Illinois','Massachusetts','Colorado',
              'Washington','Florida','Arizona','Tennessee','Wisconsin','New Mexico'])
              [1 + ((i - 1) * 5) % 13],
       2019 + (i * 3) % 6,
       CASE WHEN i % 11 = 0 THEN NULL ELSE 1 + (i * 5) % 6 END
FROM generate_series(1, 240) AS i;

-- Each student takes four courses over two semesters; scores spread over 42..99.
INSERT INTO enrollments
SELECT s.id,
       1 + ((s.id * 3 + k * 5) % 12),
       (ARRAY['2025 Fall', '2026 Spring'])[1 + k % 2],
       score,
       CASE WHEN score >= 90 THEN 'A' WHEN score >= 80 THEN 'B' WHEN score >= 70 THEN 'C'
            WHEN score >= 60 THEN 'D' ELSE 'F' END
FROM students AS s
CROSS JOIN generate_series(0, 3) AS k
CROSS JOIN LATERAL (SELECT (42 + ((s.id * 37 + k * 53) % 58))::numeric(5, 1) AS score) AS g;

ANALYZE;
