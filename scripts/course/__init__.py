"""The course: the student exercises and their grading with otter-grader."""
