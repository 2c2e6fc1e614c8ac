/* SPDX-License-Identifier: ISC */
/*
 * Tests for server/envfile.c: the syntax of systemd's EnvironmentFile=, as a table of files
 * and what they give, and the lines meshgate refuses (with the line named).
 */
#include <criterion/criterion.h>

#include "envfile.h"
#include "harness.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

TestSuite(envfile);

struct parsed_case {
    const char *text;
    const char *name;
    const char *value; /* what the file gives name */
};

static const struct parsed_case parsed[] = {
    {"A=1\n", "A", "1"},
    {"A=1", "A", "1"}, /* no newline at the end */
    {"  A = 1  \n", "A", "1"},
    {"A=hello world\n", "A", "hello world"},
    {"A=\n", "A", ""},
    {"A=\"q u\"\n", "A", "q u"},
    {"A=\"x\"   \n", "A", "x"},
    {"A='x \"y\" $z \\n'\n", "A", "x \"y\" $z \\n"},
    {"A=\"a\\\"b\\\\c\\$d\\`e\\n\"\n", "A", "a\"b\\c$d`e\\n"},
    {"A=foo\"bar\"\n", "A", "foo\"bar\""},
    {"A=one\\\ntwo\n", "A", "onetwo"},
    {"A=\"one\\\ntwo\"\n", "A", "onetwo"},
    {"A='multi\nline'\n", "A", "multi\nline"},
    {"A=a\\ b\n", "A", "a b"},
    {"A=a\\\\b\n", "A", "a\\b"},
    {"A=1 # not a comment\n", "A", "1 # not a comment"},
    {"# comment\n; comment\n\n   # indented comment\nA=1\n", "A", "1"},
    {"A=1\nA=2\n", "A", "2"},
    {"A=1\r\n", "A", "1"},
    {"MESHGATE_TRUSTED_PROXIES=\"127.0.0.1, ::1\"\n", "MESHGATE_TRUSTED_PROXIES", "127.0.0.1, ::1"},
    {"_x9=y\n", "_x9", "y"},
};

Test(envfile, each_form_systemd_accepts_gives_the_value_systemd_gives)
{
    for (size_t i = 0; i < sizeof parsed / sizeof parsed[0]; i++) {
        struct mg_envfile f = {0};
        char err[300] = "";
        const struct parsed_case *c = &parsed[i];
        cr_assert_eq(mg_envfile_parse(&f, c->text, strlen(c->text), err, sizeof err), 0,
                     "case %zu refused: %s", i, err);
        const char *got = mg_envfile_get(&f, c->name);
        cr_expect_not_null(got, "case %zu: %s not found", i, c->name);
        if (got)
            cr_expect_str_eq(got, c->value, "case %zu", i);
        mg_envfile_free(&f);
    }
}

Test(envfile, comments_and_blank_lines_give_nothing)
{
    const char *text = "# a\n\n; b\n   \n\t# c\n";
    struct mg_envfile f = {0};
    char err[300];
    cr_assert_eq(mg_envfile_parse(&f, text, strlen(text), err, sizeof err), 0, "%s", err);
    cr_expect_eq(f.count, 0);
    mg_envfile_free(&f);
}

struct refused_case {
    const char *text;
    const char *message; /* the start of err */
};

static const struct refused_case refused[] = {
    {"A\n", "line 1: \"A\" is not NAME=value"},
    {"B=1\nMESHGATE WORKERS=4\n", "line 2: \"MESHGATE WORKERS\" is not a variable name"},
    {"A=\"open\n", "line 1: the double quote opened here is never closed"},
    {"A='x\n\nB=2\n", "line 1: the single quote opened here is never closed"},
    {"\n\nA=\"x\ny\"\nB\n", "line 5: \"B\" is not NAME=value"},
    {"1A=2\n", "line 1: \"1A\" is not a variable name"},
    {"=x\n", "line 1: \"\" is not a variable name"},
    {"\"A\"=1\n", "line 1: \"\"A\"\" is not a variable name"},
};

Test(envfile, lines_systemd_would_drop_are_refused_naming_the_line)
{
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        struct mg_envfile f = {0};
        char err[300] = "";
        const struct refused_case *c = &refused[i];
        cr_expect_eq(mg_envfile_parse(&f, c->text, strlen(c->text), err, sizeof err), -1,
                     "case %zu accepted", i);
        cr_expect(strncmp(err, c->message, strlen(c->message)) == 0, "case %zu: %s", i, err);
        cr_expect_eq(f.count, 0, "case %zu: a refused file gives nothing", i);
        mg_envfile_free(&f);
    }
}

Test(envfile, a_nul_byte_is_refused)
{
    const char text[] = "A=b\0c\n";
    struct mg_envfile f = {0};
    char err[300];
    cr_expect_eq(mg_envfile_parse(&f, text, sizeof text - 1, err, sizeof err), -1);
    cr_expect(strstr(err, "NUL"), "%s", err);
}

Test(envfile, read_names_the_file_when_it_is_missing_or_not_a_file)
{
    struct mg_envfile f;
    char err[600];
    cr_expect_eq(mg_envfile_read(&f, "/nonexistent/meshgate.env", err, sizeof err), -1);
    cr_expect(strstr(err, "MESHGATE_ENV_FILE=/nonexistent/meshgate.env: cannot read it"), "%s",
              err);
    cr_expect_eq(mg_envfile_read(&f, "/tmp", err, sizeof err), -1);
    cr_expect(strstr(err, "MESHGATE_ENV_FILE=/tmp: must be a regular file"), "%s", err);
}

Test(envfile, read_parses_the_file_and_prefixes_a_syntax_error_with_its_name)
{
    char dir[128], path[256], err[600];
    mg_test_tmpdir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/meshgate.env", dir);
    FILE *out = fopen(path, "w");
    cr_assert(out);
    fputs("# header\nMESHGATE_WORKERS=4\nMESHGATE_LOG_LEVEL='debug'\n", out);
    fclose(out);
    struct mg_envfile f;
    cr_assert_eq(mg_envfile_read(&f, path, err, sizeof err), 0, "%s", err);
    cr_expect_str_eq(mg_envfile_get(&f, "MESHGATE_WORKERS"), "4");
    cr_expect_str_eq(mg_envfile_get(&f, "MESHGATE_LOG_LEVEL"), "debug");
    cr_expect_eq(f.vars[0].line, 2);
    cr_expect_null(mg_envfile_get(&f, "MESHGATE_DB"));
    mg_envfile_free(&f);

    out = fopen(path, "w");
    fputs("MESHGATE_WORKERS=4\nMESHGATE_WORKERS 5\n", out);
    fclose(out);
    cr_expect_eq(mg_envfile_read(&f, path, err, sizeof err), -1);
    char expected[400];
    snprintf(expected, sizeof expected, "MESHGATE_ENV_FILE=%s: line 2: ", path);
    cr_expect(strncmp(err, expected, strlen(expected)) == 0, "%s", err);
    mg_test_rmdir(dir);
}
