// pgjdbc calling pgnl's SQL functions straight on PostgreSQL (no proxy); run by
// tests/integration/test_sql_functions.py with the JDK's source launcher:
//
//   java -cp /usr/share/java/postgresql.jar tests/integration/jdbc/Functions.java URL USER PASSWORD QUESTION
//
// Prints one "key=value" line a fact: nl.sql's SQL, nl.ask's row and its column type (a
// PreparedStatement, the question as a parameter), the SQLSTATE and message of an empty
// question, that the connection answers after it, and nl.refresh_index's row for one column
// with its summary NOTICE (a JDBC warning).

import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.Properties;

public class Functions {
    static void print(String key, Object value) {
        System.out.println(key + "=" + String.valueOf(value).replace("\n", " "));
    }

    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.setProperty("user", args[1]);
        props.setProperty("password", args[2]);
        String question = args[3];
        try (Connection conn = DriverManager.getConnection(args[0], props)) {
            try (PreparedStatement ps = conn.prepareStatement("SELECT nl.sql(?)")) {
                ps.setString(1, question);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    print("sql", rs.getString(1));
                }
            }
            try (PreparedStatement ps = conn.prepareStatement("SELECT * FROM nl.ask(?)")) {
                ps.setString(1, question);
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    print("ask", rs.getString(1));
                    print("ask_type", rs.getMetaData().getColumnTypeName(1));
                }
            }
            try (Statement st = conn.createStatement()) {
                st.executeQuery("SELECT nl.sql('')");
                print("error_state", "none");
            } catch (SQLException e) {
                print("error_state", e.getSQLState());
                print("error_message", e.getMessage());
            }
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("SELECT 1")) {
                rs.next();
                print("after_error", rs.getInt(1));
            }
            try (Statement st = conn.createStatement();
                    ResultSet rs = st.executeQuery(
                            "SELECT outcome FROM nl.refresh_index('public') "
                                    + "WHERE table_name = 'students' AND column_name = 'home_city'")) {
                rs.next();
                print("refresh_home_city", rs.getString(1));
                for (java.sql.SQLWarning w = st.getWarnings(); w != null; w = w.getNextWarning()) {
                    if (w.getMessage().startsWith("indexed ")) {
                        print("refresh_notice", w.getMessage());
                    }
                }
            }
        }
    }
}
